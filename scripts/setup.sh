#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment and install sglang-engram into it
# with SGLang 0.5.23, the test tools and the cluster extra (Ray, sglang-router).
# Idempotent; the first run downloads ~11 GB.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${ENGRAM_VENV:-.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating virtual environment $VENV"
  python3 -m venv "$VENV"
fi
# NOTE: a stamp of pyproject.toml skips the install when nothing changed (and so works
# offline once installed); a different checkout or edited dependencies reinstall.
STAMP="$VENV/.sglang-engram-installed"
WANT="$(sha256sum pyproject.toml | cut -d' ' -f1) $PWD"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && "$VENV/bin/python" -c "import sglang_engram" 2>/dev/null; then
  echo "setup: $VENV is up to date"
  exit 0
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
echo "setup: installing sglang-engram (sglang==0.5.23, torch, triton, ray, sglang-router) into $VENV"
"$VENV/bin/python" -m pip install --quiet --progress-bar off -e ".[test,cluster]"
echo "$WANT" > "$STAMP"
