#!/usr/bin/env bash
# Set everything up and run the whole test suite (GPU tests skip without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
VENV="${ENGRAM_VENV:-.venv}"
"$VENV/bin/ruff" check .
exec "$VENV/bin/python" -m pytest "$@"
