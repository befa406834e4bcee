"""``python -m sglang_engram doctor``: report what the plugin found on this machine."""

from __future__ import annotations

import contextlib
import json
import logging
import sys

from engram.cli import Parser, debug_of, run


def parser() -> Parser:
    top = Parser(
        prog="python -m sglang_engram",
        description="Tools of the sglang-engram plugin (clusters: python -m "
        "sglang_engram.cluster).",
    )
    sub = top.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser(
        "doctor",
        help="Report the SGLang version, which hooks applied, the GPU and its "
        "host-memory / huge-page situation.",
        description="Report the SGLang version, which hooks applied, the GPU and its "
        "host-memory / huge-page situation. The warnings upstream SGLang, transformers "
        "and torch print while their modules are imported are left out (--debug shows "
        "them).",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--no-hooks",
        action="store_true",
        help="skip applying the hooks (they import SGLang's model code, which is slow)",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)

    def body() -> int:
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        # NOTE: the report says which sgl_kernel this machine gets; its log line would
        # only repeat that on stderr.
        logging.getLogger("sglang_engram.integration.kernel_standin").setLevel(logging.ERROR)
        from sglang_engram.doctor.quiet import upstream_quiet
        from sglang_engram.doctor.report import collect, render

        # NOTE: importing SGLang's model code warns about this machine (no CUDA, no
        # AWQ, ...) before the report; --debug keeps those lines.
        with contextlib.nullcontext() if debug_of(args) else upstream_quiet():
            report = collect(apply_hooks=not args.no_hooks)
        print(json.dumps(report, indent=2) if args.json else render(report))
        failed = any(s.startswith("failed") for s in report["hooks"].values())
        return 1 if failed else 0

    return run(body, args)


if __name__ == "__main__":
    sys.exit(main())
