"""``sglang serve --model-type engram``: SGLang's LLM server with this plugin loaded first.

``sglang serve --help`` prints SGLang's help before any plugin loads, so it cannot list
the ``--engram-*`` flags; this serve backend (entry point group
``sglang.serve_backends``) can: ``sglang serve --model-type engram --help`` is the
server's help with them. Its detector claims checkpoints whose ``config.json`` has
n-gram tables of a family the plugin serves (DeepSeek-V4.1, Qwen3.8-Flash-Next, the tiny
model), so ``sglang serve <checkpoint> --engram-offload ssd`` selects it by itself. Serving is SGLang's own LLM path; only the plugin loading comes first.
"""

from __future__ import annotations

from sglang.cli.serve_backends import (
    SERVE_BACKEND_API_VERSION,
    ServeBackend,
    ServeBackendDetection,
    ServeRequest,
)

from sglang_engram.protocol.runtime import get_runtime


def backend() -> ServeBackend:
    """The ``sglang.serve_backends`` entry point's factory."""
    return ServeBackend(api_version=SERVE_BACKEND_API_VERSION, run=run, detect=detect)


def run(request: ServeRequest) -> None:
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.server_args import prepare_server_args

    if any(arg in request.argv for arg in ("-h", "--help")):
        try:
            prepare_server_args(["--help"])
        except SystemExit:
            pass  # argparse exits after printing the help
        return
    from sglang.launch_server import run_server

    run_server(prepare_server_args(list(request.argv)))


def detect(request: ServeRequest) -> ServeBackendDetection:
    """MATCH for a local checkpoint of a family whose tables the plugin places; UNKNOWN when there is no local
    ``config.json`` to read (a hub id: SGLang's LLM backend serves it, plugin loaded)."""
    if request.model_path is None:
        return ServeBackendDetection.UNKNOWN
    try:
        # NOTE: SGLang asks the serve backends before any plugin registers: the facts
        # go to this process's runtime, read once (the flag hook of run() asks again).
        facts = get_runtime().model_facts(request.model_path)
    except (OSError, ValueError):
        return ServeBackendDetection.UNKNOWN
    if facts.hf_config is None:
        return ServeBackendDetection.UNKNOWN
    return ServeBackendDetection.MATCH if facts.serves_tables else ServeBackendDetection.NO_MATCH
