#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install sglang-engram into it
# with SGLang 0.5.23 and the test tools. Idempotent; the first run downloads ~11 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ENGRAM_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
echo "setup: installing sglang-engram (sglang==0.5.23, torch, triton, ray, sglang-router) into $VENV"
"$VENV/bin/python" -m pip install --quiet --progress-bar off -e ".[test]"
