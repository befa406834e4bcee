"""STAND-IN for an SGLang server in the sweep tests of ``sglang_engram.compare``, for
what a real server cannot be made to do: hold a fixed inter-token delay (known TPOT and
Engram counters to check the sweep and the report against) and die mid-point on purpose.

It speaks what ``python -m sglang.benchmark.serving`` and the sweep use: ``/health``,
``/v1/models``, ``/model_info``, ``/server_info`` and streaming ``/generate`` (the native
backend: cumulative text with ``meta_info.completion_tokens``), each token paced by a
configured time to first token and inter-token delay, each due at a fixed time after
the one before so the delays do not drift. ``/metrics`` serves ``sglang:engram_*``
counters that advance per generated token: ``ROWS_PER_TOKEN`` rows requested, half of them unique, each unique
row read from the placement's tier except a quarter served by the "hbm" hot cache.

``--die-after N`` ends the process (exit 1, no goodbye) when request N+1 arrives, as a
server that crashes mid-run. It takes ``launch_server``'s flags (``--model-path``,
``--port``, ...) so a ``launch:`` config can start it through the sweep's
``SGLANG_ENGRAM_COMPARE_SERVER_CMD``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROWS_PER_TOKEN = 96  # 2 Engram layers x 48 rows
UNIQUE_SHARE = 0.5
HOT_SHARE = 0.25
ROW_BYTES = 264


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", default="standin-model")
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--engram-offload", default="dram")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--die-after", type=int, default=0, help="requests served before dying")
    args, _ = p.parse_known_args()
    return args


ARGS = _parse()
LOCK = threading.Lock()
STATE = {"requests": 0, "rows": 0.0}


def _count_request() -> None:
    with LOCK:
        STATE["requests"] += 1
        if ARGS.die_after and STATE["requests"] > ARGS.die_after:
            sys.stderr.write(f"[standin:{ARGS.port}] dying at request {STATE['requests']}\n")
            os._exit(1)


def _count_token() -> None:
    with LOCK:
        STATE["rows"] += ROWS_PER_TOKEN


def _metrics() -> str:
    with LOCK:
        rows = STATE["rows"]
    if ARGS.engram_offload == "off":
        return ""
    unique = rows * UNIQUE_SHARE
    read = unique * ROW_BYTES
    tier = ARGS.engram_offload
    hot = read * HOT_SHARE if tier in ("dram", "ssd") else 0.0
    lines = [
        "# TYPE sglang:engram_rows_requested counter",
        f'sglang:engram_rows_requested_total{{layer="0"}} {rows / 2}',
        f'sglang:engram_rows_requested_total{{layer="1"}} {rows / 2}',
        "# TYPE sglang:engram_unique_rows counter",
        f'sglang:engram_unique_rows_total{{layer="0"}} {unique}',
        "# TYPE sglang:engram_bytes_read counter",
        f'sglang:engram_bytes_read_total{{tier="{tier}"}} {read - hot}',
    ]
    if hot:
        lines.append(f'sglang:engram_bytes_read_total{{tier="hbm"}} {hot}')
    lines += [
        "# TYPE sglang:engram_table_bytes gauge",
        f'sglang:engram_table_bytes{{tier="{tier}"}} {float(1 << 30)}',
        "# TYPE sglang:engram_hot_cache_hit_ratio gauge",
        f"sglang:engram_hot_cache_hit_ratio {HOT_SHARE if hot else 0.0}",
    ]
    return "\n".join(lines) + "\n"


class Api(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *a: object) -> None:
        pass

    def _send(self, body: bytes, ctype: str = "application/json", code: int = 200) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?")[0]
        info = {"model_path": ARGS.model_path, "tokenizer_path": ARGS.tokenizer_path}
        routes = {
            "/health": {},
            "/v1/models": {"object": "list", "data": [{"id": ARGS.model_path}]},
            "/model_info": {**info, "is_generation": True},
            "/server_info": {**info, "tp_size": ARGS.tp_size, "standin": True},
        }
        if path == "/metrics":
            return self._send(_metrics().encode(), "text/plain")
        if path not in routes:
            return self._send(b'{"error": "no route"}', code=404)
        return self._send(json.dumps(routes[path]).encode())

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/generate":
            return self._send(b'{"error": "no route"}', code=404)
        start = time.monotonic()
        _count_request()
        prompt = req.get("input_ids") or req.get("text", "").split()
        budget = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        text = ""
        due = start + ARGS.ttft_ms / 1000
        for k in range(1, budget + 1):
            if k > 1:
                due += ARGS.itl_ms / 1000
            time.sleep(max(0.0, due - time.monotonic()))
            text += f"w{k} "
            _count_token()
            chunk = {
                "text": text,
                "meta_info": {"prompt_tokens": len(prompt), "completion_tokens": k},
            }
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main() -> None:
    Server((ARGS.host, ARGS.port), Api).serve_forever()


if __name__ == "__main__":
    main()
