#!/usr/bin/env bash
# One call on a lent GPU machine: the GPU tests of engram_kernels, of the ssd/hot-cache
# tables (every row format: DeepSeek-V4.1 Engram, Qwen3.8-Flash-Next PLE fp8 and bf16) and of the reference model (trained tiny model, hbm vs dram), then ssd lookups as
# eager breaks of CUDA-graph-captured decode steps (tokens equal to dram's, step time with
# and without graphs), then the gather benchmark. Runs on the machine's own torch and
# Triton (no SGLang, no package registry): engram and engram_kernels are imported from
# this checkout via PYTHONPATH.
# Writes gpu_tests.log, graph_breaks.log, graph_breaks.json, bench.log and bench.json
# under $OUT when OUT is set.
# Budget: under 8 minutes (tests <= 4, graph breaks <= 1.5, benchmark <= 2.5).
#
#   bash benchmark/device_check.sh            # from the repository root
#   PYTHON=/path/to/python3 bash benchmark/device_check.sh

set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/sgl-kernel${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DEST="${OUT:-}"

save() {  # copy stdin to $DEST/$1 as well as to the terminal
    if [ -n "$DEST" ]; then tee "$DEST/$1"; else cat; fi
}

"$PY" - <<'PY' 2>&1 | save environment.log
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda,
      "hip", torch.version.hip, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
PY

# NOTE: the lent machine has no package registry. What it lacks (pytest, xxhash for the SSD
# tier's block hashes, tokenizers for the reference-model test) travels as wheels made here:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d .device-wheels pytest xxhash tokenizers
# (run's `carry: [".device-wheels"]`); without tokenizers that test skips itself.
if compgen -G ".device-wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps .device-wheels/*.whl
fi
"$PY" -c "import pytest" 2>/dev/null || echo "device_check: pytest is not installed here and no .device-wheels/ was carried"

timeout 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider test/kernels test/ssd/test_gpu.py test/eval/test_gpu.py 2>&1 | save gpu_tests.log
tests=${PIPESTATUS[0]}

# ssd decode inside captured graphs: exit 1 if any run's tokens differ from dram's
timeout 90 "$PY" benchmark/graph_break_check.py 2>&1 | save graph_breaks.log
graphs=${PIPESTATUS[0]}
if [ -n "$DEST" ]; then tail -n 1 "$DEST/graph_breaks.log" > "$DEST/graph_breaks.json"; fi

timeout 150 "$PY" benchmark/bench_gather.py 2>&1 | save bench.log
bench=${PIPESTATUS[0]}
if [ -n "$DEST" ]; then tail -n 1 "$DEST/bench.log" > "$DEST/bench.json"; fi

echo "device_check: gpu tests exit $tests, graph breaks exit $graphs, benchmark exit $bench"
[ "$tests" -eq 0 ] && [ "$graphs" -eq 0 ] && [ "$bench" -eq 0 ]
