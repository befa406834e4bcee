#!/usr/bin/env bash
# The long run of the request fuzz suite: every fuzz test of test/serving/ (the tiny Engram
# model in hbm/dram/ssd, Qwen3.8-Flash-Next in hbm/dram/ssd/off, each through PD and the
# sglang-router with decode off and dram; DeepSeek-V4.1 in ssd and through PD with decode
# dram) with REQUESTS hypothesis-drawn malformed and degenerate requests per target
# instead of CI's share, plus the clients-that-go-away tests. Prints one line per target
# (kinds, requests, 2xx / 4xx / 5xx, deaths, RSS before and after) and, last, one line of
# JSON. Exits nonzero if any test failed. SELECT, a pytest -k expression, narrows the
# targets (e.g. "dram": each family's dram server and its PD pair with a dram decode
# worker, ~10 minutes on a 2-core machine at 1,000; "dsv41": DeepSeek-V4.1's two).
#
#   bash benchmark/fuzz_requests.sh [REQUESTS] [SEED] [SELECT]
set -uo pipefail
cd "$(dirname "$0")/.."
REQUESTS="${1:-1000}"
SEED="${2:-20261204}"
SELECT="${3:-}"
case "$REQUESTS$SEED" in *[!0-9]*|"") echo "error: REQUESTS and SEED must be whole numbers" >&2; exit 2;; esac
PY="${ENGRAM_VENV:-.venv}/bin/python"
REPORT="$(mktemp)"
trap 'rm -f "$REPORT"' EXIT
ENGRAM_FUZZ_REQUESTS="$REQUESTS" ENGRAM_FUZZ_SEED="$SEED" ENGRAM_FUZZ_REPORT="$REPORT" \
  "$PY" -m pytest -q -p no:cacheprovider -k "(fuzzed or go_away)${SELECT:+ and ($SELECT)}" \
  test/serving/test_placements.py test/serving/test_qwen4_placements_served.py \
  test/serving/test_pd.py test/serving/test_qwen4_pd.py \
  test/serving/test_dsv41_placements_served.py test/serving/test_dsv41_pd.py
status=$?
"$PY" - "$REPORT" "$status" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print(f"{'target':58} {'kinds':>5} {'requests':>8} {'2xx':>5} {'4xx':>5} {'5xx':>4} {'deaths':>6} {'hung':>4} {'RSS MiB before -> after':>24}")
for r in rows:
    rss = f"{r['rss_before_mib']} -> {r['rss_after_mib']}"
    print(f"{r['target']:58} {r['kinds_tried']:>5} {r['requests']:>8} {r['2xx']:>5} {r['4xx']:>5} {r['5xx']:>4} {r['deaths']:>6} {r['hung']:>4} {rss:>24}")
print(json.dumps({"targets": rows, "tests_passed": sys.argv[2] == "0"}))
PY
exit "$status"
