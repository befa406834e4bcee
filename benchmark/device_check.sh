#!/usr/bin/env bash
# One call on a lent GPU machine, from the checkout root:
#   1. the versions: torch, Triton, CUDA/HIP, the driver (nvidia-smi or rocm-smi), the GPU;
#   2. the `gpu` tests of engram_kernels (gathers at 393,216 distinct ids, heavy repeats,
#      one id only, 1,000 random batches of 3 k-400 k ids against the reference, host
#      tables pinned by torch, CUDA-graph replays), of the ssd/hot-cache tables (every row
#      format) and of the reference model (trained tiny model, hbm vs dram);
#   3. ssd lookups as eager breaks of CUDA-graph-captured decode steps (tokens equal to
#      dram's, step time with and without graphs): benchmark/graph_break_check.py;
#   4. the gather benchmark, each case in a child process: benchmark/bench_gather.py.
# Runs on the machine's own torch and Triton (no SGLang, no package registry): engram and
# engram_kernels are imported from this checkout via PYTHONPATH.
# Exit 0 only if every step passed: a failed test, a device fault (reported by the tests,
# by bench_gather's children or seen in any log) or a step past its time limit fails it.
# Writes environment.log, gpu_tests.log, graph_breaks.log, graph_breaks.json, bench.log
# and bench.json under $OUT (a temporary folder when OUT is unset).
# Budget: under 6 minutes (tests <= 160 s, graph breaks <= 75 s, benchmark <= 110 s).
#
#   bash benchmark/device_check.sh            # from the repository root
#   PYTHON=/path/to/python3 bash benchmark/device_check.sh

set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/sgl-kernel${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
DEST="${OUT:-$(mktemp -d)}"  # the logs, kept (and looked through for faults) either way
START=$SECONDS

save() {  # copy stdin to $DEST/$1 as well as to the terminal
    tee "$DEST/$1"
}

{
    "$PY" - <<'PY'
import platform
import torch, triton
gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
print(f"python {platform.python_version()}, torch {torch.__version__}, triton {triton.__version__}, "
      f"cuda {torch.version.cuda}, hip {torch.version.hip}, device {gpu}")
PY
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv
    elif command -v rocm-smi >/dev/null; then
        rocm-smi --showdriverversion --showproductname
    else
        echo "driver: neither nvidia-smi nor rocm-smi found"
    fi
} 2>&1 | save environment.log

# NOTE: the lent machine has no package registry. What it lacks (pytest, xxhash for the SSD
# tier's block hashes, tokenizers for the reference-model test) travels as wheels made here:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --platform manylinux2014_x86_64 -d .device-wheels pytest xxhash tokenizers
# (run's `carry: [".device-wheels"]`); without tokenizers that test skips itself.
if compgen -G ".device-wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps .device-wheels/*.whl
fi
"$PY" -c "import pytest" 2>/dev/null || echo "device_check: pytest is not installed here and no .device-wheels/ was carried"

timeout -k 5 160 "$PY" -m pytest -q -m gpu -p no:cacheprovider test/kernels test/ssd/test_gpu.py test/eval/test_gpu.py 2>&1 | save gpu_tests.log
tests=${PIPESTATUS[0]}

# ssd decode inside captured graphs: exit 1 if any run's tokens differ from dram's
timeout -k 5 75 "$PY" benchmark/graph_break_check.py 2>&1 | save graph_breaks.log
graphs=${PIPESTATUS[0]}
tail -n 1 "$DEST/graph_breaks.log" > "$DEST/graph_breaks.json"

timeout -k 5 110 "$PY" benchmark/bench_gather.py --child-timeout 90 2>&1 | save bench.log
bench=${PIPESTATUS[0]}
tail -n 1 "$DEST/bench.log" > "$DEST/bench.json"

# NOTE: a device fault is a failure even where a step's exit status missed it.
faults=0
if grep -qiE "illegal memory access|unspecified launch failure|misaligned address" \
    "$DEST/gpu_tests.log" "$DEST/graph_breaks.log" "$DEST/bench.log"; then
    faults=1
fi

echo "device_check: gpu tests exit $tests, graph breaks exit $graphs, benchmark exit $bench," \
    "device faults seen $faults, $((SECONDS - START)) s; logs in $DEST"
[ "$tests" -eq 0 ] && [ "$graphs" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$faults" -eq 0 ]
