#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install sglang-engram into it
# with SGLang 0.5.23 and every extra: the test tools, cluster (Ray, sglang-router, psutil)
# and compare (scipy, matplotlib, psutil); on a machine without a GPU also the pd-cpu extra
# (mooncake's non-CUDA KV transfer) and the libibverbs1 system library it loads.
# Idempotent; the first run downloads ~11 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ENGRAM_VENV:-.venv}"
EXTRAS="test,cluster,compare"
if ! compgen -G "/dev/nvidia[0-9]*" >/dev/null && [ ! -e /dev/kfd ]; then
  EXTRAS="$EXTRAS,pd-cpu"
  if ! ldconfig -p 2>/dev/null | grep -q "libibverbs.so.1 "; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "setup: installing libibverbs1 (mooncake's KV transfer loads it, TCP included)"
      apt-get install -y -qq libibverbs1 >/dev/null || { apt-get update -qq && apt-get install -y -qq libibverbs1 >/dev/null; }
    else
      echo "setup: PD disaggregation on this CPU needs libibverbs1: sudo apt-get install libibverbs1" >&2
    fi
  fi
fi
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  python3 -m venv "$VENV"
fi
# NOTE: a stamp of pyproject.toml and the extras skips the install when nothing changed
# (and so works offline once installed); a different checkout or edited dependencies
# reinstall.
STAMP="$VENV/.sglang-engram-installed"
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1) $EXTRAS $PWD"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$VENV/bin/python" -c "import sglang_engram" 2>/dev/null; then
  echo "setup: $VENV is up to date"
  exit 0
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
echo "setup: installing sglang-engram[$EXTRAS] (sglang==0.5.23, torch, triton, ray, sglang-router, scipy, matplotlib) into $VENV"
"$VENV/bin/python" -m pip install --quiet --progress-bar off -e ".[$EXTRAS]"
echo "$WANT" > "$STAMP"
