"""Engram row gathers on a GPU against the copies and the naive path they must beat.

Measures in one run, at each --rows size (default 3,072 / 12,288 / 24,576 / 393,216:
decode at 64, 256 and 512 tokens x 48 rows, prefill at 8,192), for uniform ids
(distinct rows) and Zipf-distributed n-grams:

  * the ceilings: pinned host-to-device copy and device-to-device copy bandwidth;
  * the UVA gather (``dram``: packed 264-byte rows on huge pages, registered), with the
    dedup and sort where ``dram`` uses them (``lookup.DEDUP_MIN_ROWS``), and both
    variants for the record;
  * the naive CPU path: ``index_select`` on every CPU thread into pinned staging + one
    host-to-device copy;
  * the HBM gather (``hbm``: separate arrays in device memory).

Prints per size UVA / H2D (bytes of every requested row over the copy bandwidth) and
UVA / naive (time ratio), Zipf / uniform rows per second, HBM / D2D at the largest
size (264 B read + 2*D B written per row), and the dedup cost when nothing repeats
(sizes where ``dram`` dedups), each with its target; the last line is JSON.

The cases run in child processes (``gather_cases.py``): a device fault ends the CUDA
context, so a child that dies is reported as one line naming the case it was in, and
its remaining cases run in a fresh child. Exit 0 when every case ran and the UVA bytes
equal the HBM gather's (targets are reported, not enforced), 1 otherwise; 2 for bad
arguments or a machine without a GPU.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("", "sgl-kernel")]

from engram.cli import Parser, RawDescriptionFormatter, number, run  # noqa: E402
from engram.errors import EngramInputError  # noqa: E402

CHILD = Path(__file__).with_name("gather_cases.py")
DISTS = ("uniform", "zipf")
# The targets (one run on an H200-class GPU), by size where they differ.
UVA_VS_H2D = {3072: 0.60, 24576: 0.60, 393216: 0.55}
UVA_VS_NAIVE = 1.4
ZIPF_VS_UNIFORM = 1.0
HBM_VS_D2D = 0.70
DEDUP_COST = 0.05


def row_sizes(text: str) -> list[int]:
    parse = number(int, at_least=1, at_most=4_000_000)
    return sorted({parse(part) for part in text.split(",")})


def _parser() -> Parser:
    p = Parser(prog="python benchmark/bench_gather.py", description=__doc__,
               formatter_class=RawDescriptionFormatter)  # fmt: skip
    p.add_argument("--table-gib", type=number(float, above=0, at_most=64), default=8.0,
                   help="size of each table (device and host); large tables defeat caches")  # fmt: skip
    p.add_argument("--head-dim", type=number(int, at_least=32, at_most=4096), default=256,
                   help="row width D (a multiple of 32; 256 is DeepSeek-V4.1's)")  # fmt: skip
    p.add_argument("--rows", type=row_sizes, default=row_sizes("3072,12288,24576,393216"),
                   help="comma-separated batch sizes in rows (default 3072,12288,24576,393216)")  # fmt: skip
    p.add_argument("--zipf", type=number(float, above=1, at_most=4), default=1.1,
                   help="Zipf exponent of n-gram frequency")  # fmt: skip
    p.add_argument("--rep-ms", type=number(int, at_least=10, at_most=5000), default=100,
                   help="timing budget per measurement in ms")  # fmt: skip
    p.add_argument("--child-timeout", type=number(float, above=0), default=120.0,
                   help="seconds a child process may take before it is killed and the case "
                        "it was in reported")  # fmt: skip
    return p


def run_cases(
    cases: list[str], spec: dict, timeout: float, child: Path = CHILD
) -> tuple[dict, list[str]]:
    """Results by case, and one line per case that faulted or hung."""
    results: dict[str, dict] = {}
    failures: list[str] = []
    todo = list(cases)
    while todo:
        spec_of_child = {**spec, "cases": todo}
        try:
            proc = subprocess.run([sys.executable, str(child), json.dumps(spec_of_child)],
                                  capture_output=True, text=True, timeout=timeout)  # fmt: skip
            out, err, code = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out, err, code = _text(exc.stdout), f"no answer in {timeout:g} s", None
        for line in out.splitlines():
            if line.startswith("CASE "):
                result = json.loads(line[5:])
                results[result.pop("case")] = result
            elif line.strip():
                print(f"  {line}")
        todo = [c for c in todo if c not in results]
        if code == 0 and not todo:
            break
        if not todo:  # every case measured, then the child failed (closing the table)
            failures.append(f"after the last case: exit {code}: {_last_line(err)}")
            break
        failed, todo = todo[0], todo[1:]
        why = _last_line(err) if code is not None else err
        failures.append(f"{failed}: {'exit ' + str(code) + ': ' if code is not None else ''}{why}")
        print(f"FAULT {failures[-1]}", flush=True)
    return results, failures


def _text(data: bytes | str | None) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def _last_line(err: str) -> str:
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    errors = [line for line in lines if "rror" in line]
    return (errors or lines or ["(no message)"])[-1][:300]


def summarize(args, results: dict, failures: list[str]) -> dict:
    """Per size and id mix: times and ratios; then the figures the targets judge."""
    ceil = results.get("ceilings:0:-", {})
    h2d, d2d = ceil.get("h2d_gbps"), ceil.get("d2d_gbps")
    width = args.head_dim + args.head_dim // 32
    table: dict[str, dict] = {}
    for n in args.rows:
        for dist in DISTS:
            uva, nai = results.get(f"uva:{n}:{dist}"), results.get(f"naive:{n}:{dist}")
            hbm = results.get(f"hbm:{n}:{dist}")
            row: dict = {"rows": n, "ids": dist}
            if uva:
                row.update(uva_us=uva["us"], uva_gbps=n * width / uva["us"] / 1e3,
                           dedup=uva["dedup_used"], unique=uva["unique_ratio"],
                           dedup_vs_plain=uva["us_dedup"] / uva["us_plain"])  # fmt: skip
                row["uva_vs_h2d"] = row["uva_gbps"] / h2d if h2d else None
            if nai:
                row["naive_us"] = nai["us"]
                if uva:
                    row["uva_vs_naive"] = nai["us"] / uva["us"]
            if hbm:
                row["hbm_us"] = hbm["us"]
                moved = n * (width + 2 * args.head_dim)  # read + written
                row["hbm_vs_d2d"] = moved / hbm["us"] / 1e3 / d2d if d2d else None
            table[f"{n}:{dist}"] = row
    uniform = {n: table[f"{n}:uniform"] for n in args.rows}
    summary = {
        "uva_vs_h2d": {n: r.get("uva_vs_h2d") for n, r in uniform.items()},
        "uva_vs_naive": {n: r.get("uva_vs_naive") for n, r in uniform.items()},
        "zipf_vs_uniform": {n: _ratio(table, n, "uva_us") for n in args.rows},
        "hbm_vs_d2d": uniform[max(args.rows)].get("hbm_vs_d2d"),
        # where dram dedups: what the sort costs when nothing repeats
        "dedup_cost_no_repeats": {
            n: r["dedup_vs_plain"] - 1 for n, r in uniform.items() if r.get("dedup")
        },
        "mismatches": sorted(c for c, r in results.items() if r.get("equal") is False),
        "faults": failures,
    }
    return {"ceilings": ceil, "table": table, "summary": summary}


def print_report(report: dict) -> None:
    ceil, table, summary = report["ceilings"], report["table"], report["summary"]
    print(f"\n{'rows':>8} {'ids':8} {'UVA us':>9} {'GB/s':>6} {'/H2D':>6} {'naive us':>9} "
          f"{'UVA/naive':>9} {'dedup':>5} {'ded/pl':>6} {'unique':>6} {'HBM us':>8}")  # fmt: skip
    for row in table.values():
        print(f"{row['rows']:8,d} {row['ids']:8} {_f(row.get('uva_us'), 9, 1)} "
              f"{_f(row.get('uva_gbps'), 6, 1)} {_pct(row.get('uva_vs_h2d'))} "
              f"{_f(row.get('naive_us'), 9, 1)} {_f(row.get('uva_vs_naive'), 9, 2)} "
              f"{str(row.get('dedup', '-')):>5} {_f(row.get('dedup_vs_plain'), 6, 2)} "
              f"{_pct(row.get('unique'))} {_f(row.get('hbm_us'), 8, 1)}")  # fmt: skip
    print(f"\nceilings: pinned H2D copy {_f(ceil.get('h2d_gbps'), 0, 1)} GB/s, "
          f"D2D copy {_f(ceil.get('d2d_gbps'), 0, 0)} GB/s")  # fmt: skip
    for n, ratio in summary["uva_vs_h2d"].items():
        target = f" (target >= {UVA_VS_H2D[n]:.0%})" if n in UVA_VS_H2D else ""
        print(f"{n:8,d} rows, uniform: UVA/H2D {_pct(ratio).strip()}{target}, UVA/naive "
              f"{_f(summary['uva_vs_naive'][n], 0, 2)} (target >= {UVA_VS_NAIVE}); Zipf/uniform "
              f"rows/s {_f(summary['zipf_vs_uniform'][n], 0, 2)} (target >= {ZIPF_VS_UNIFORM:g})")  # fmt: skip
    largest = max(summary["uva_vs_h2d"])
    print(f"HBM gather / D2D copy at {largest:,} rows: {_pct(summary['hbm_vs_d2d']).strip()} "
          f"(target >= {HBM_VS_D2D:.0%})")  # fmt: skip
    costs = summary["dedup_cost_no_repeats"]
    text = ", ".join(f"{c:+.1%} at {n:,}" for n, c in costs.items()) or "no size dedups"
    print(f"dedup cost when nothing repeats (UVA, sizes dram dedups): {text} "
          f"(target <= +{DEDUP_COST:.0%})")  # fmt: skip
    print(f"faults: {len(summary['faults'])}; UVA bytes differing from the HBM gather's: "
          f"{', '.join(summary['mismatches']) or 'none'}")  # fmt: skip


def _ratio(table: dict, n: int, key: str) -> float | None:
    """Zipf / uniform rows per second (same rows per batch: the inverse time ratio)."""
    uni, zipf = table[f"{n}:uniform"].get(key), table[f"{n}:zipf"].get(key)
    return uni / zipf if uni and zipf else None


def _f(value: float | None, width: int, digits: int) -> str:
    return f"{value:{width}.{digits}f}" if value is not None else f"{'-':>{width}}"


def _pct(value: float | None) -> str:
    return f"{value:6.0%}" if value is not None else f"{'-':>6}"


def measure(args) -> int:
    import torch

    if not torch.cuda.is_available():
        raise EngramInputError(
            "bench_gather.py needs a CUDA or ROCm GPU and torch sees none here; the "
            "kernels' CPU checks are the tests: pytest test/kernels"
        )
    if args.head_dim % 32:
        raise EngramInputError(f"--head-dim must be a multiple of 32, not {args.head_dim}")
    spec = {"table_gib": args.table_gib, "head_dim": args.head_dim, "zipf": args.zipf,
            "rep_ms": args.rep_ms}  # fmt: skip
    device_cases = ["ceilings:0:-"] + [f"hbm:{n}:{d}" for n in args.rows for d in DISTS]
    host_cases = [f"{k}:{n}:{d}" for n in args.rows for d in DISTS for k in ("naive", "uva")]
    results, failures = {}, []
    for cases in (device_cases, host_cases):  # one table (device, or host too) per child
        got, failed = run_cases(cases, spec, args.child_timeout)
        results.update(got)
        failures += failed
    report = summarize(args, results, failures)
    print_report(report)
    print(json.dumps({"gpu": True, "table_gib": args.table_gib, "rows": args.rows, **report}))
    return 1 if failures or report["summary"]["mismatches"] else 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    return run(lambda: measure(args), args)


if __name__ == "__main__":
    sys.exit(main())
