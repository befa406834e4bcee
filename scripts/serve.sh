#!/usr/bin/env bash
# The main job: serve the bundled trained tiny Engram model through SGLang with the
# Engram tables in pinned host DRAM. Extra arguments go to sglang.launch_server.
set -euo pipefail
cd "$(dirname "$0")/.."
# NOTE: checked before the ~11 GB install: SGLang cannot serve on a CPU-only machine.
if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null && [ ! -e /dev/kfd ]; then
  echo "serve: no CUDA or ROCm GPU on this machine; SGLang needs one to serve (the tests run without: bash scripts/test.sh)" >&2
  echo "serve: the trained tiny model runs on this CPU without SGLang: bash scripts/setup.sh && .venv/bin/python -m engram.model generate --placement dram \"def main(\"" >&2
  exit 2
fi
bash scripts/setup.sh
VENV="${ENGRAM_VENV:-.venv}"
MODEL="${ENGRAM_MODEL_DIR:-models/tiny-engram}"
# NOTE: copied again when $MODEL holds another build (the random model, an older training).
"$VENV/bin/python" -m engram.model build --out "$MODEL" --reuse
exec "$VENV/bin/python" -m sglang.launch_server --model-path "$MODEL" \
  --engram-offload dram --host 127.0.0.1 --port "${PORT:-30000}" "$@"
