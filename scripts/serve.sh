#!/usr/bin/env bash
# The main job: serve the bundled trained tiny Engram model through SGLang with the
# Engram tables in host DRAM. On a GPU machine SGLang serves on the GPU; without one it
# serves on SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1 --device cpu). Extra arguments
# go to sglang.launch_server (they come last, so they override ours); PORT sets the port.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${ENGRAM_VENV:-.venv}"
MODEL="${ENGRAM_MODEL_DIR:-models/tiny-engram}"
PORT="${PORT:-30000}"
# NOTE: copied again when $MODEL holds another build (the random model, an older training).
"$VENV/bin/python" -m engram.model build --out "$MODEL" --reuse
DEVICE_ARGS=()
if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null && [ ! -e /dev/kfd ]; then
  # NOTE: a modest KV pool: the CPU engine's default takes ~72 % of free host memory.
  export SGLANG_USE_CPU_ENGINE=1
  DEVICE_ARGS=(--device cpu --max-total-tokens 65536)
  echo "serve: no GPU here: serving on SGLang's CPU engine"
fi
URL="http://127.0.0.1:$PORT"
echo "serve: $MODEL at $URL (Engram tables in DRAM); once it logs 'The server is fired up', try:"
echo "  curl -s $URL/generate -H 'Content-Type: application/json' -d '{\"text\": \"def main(\", \"sampling_params\": {\"max_new_tokens\": 32}}'"
echo "  curl -s $URL/metrics | grep sglang:engram_rows_requested"
exec "$VENV/bin/python" -m sglang.launch_server --model-path "$MODEL" \
  --engram-offload dram --host 127.0.0.1 --port "$PORT" --enable-metrics "${DEVICE_ARGS[@]}" "$@"
