"""GPU STAND-IN for `python -m sglang.launch_server` in the CPU cluster tests.

SGLang cannot serve without a GPU, so the CPU tests point the launcher at this script
(SGLANG_ENGRAM_CLUSTER_WORKER_CMD). It takes the same command line, and speaks as much
of SGLang's HTTP API as the sglang-router uses: /health, /server_info, /model_info,
/generate (and their get_* aliases), plus /metrics with an Engram table gauge for the
placement it was given.

PD mode is mimicked end to end: a prefill stand-in serves a bootstrap port and keeps
each request's prompt under its bootstrap_room (its "KV cache"); a decode stand-in
fetches it from bootstrap_host:bootstrap_port, as a real decode worker pulls the KV
cache, and answers with a text derived from it. A request that reached the decode
worker without the right prefill worker cannot be answered.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOMS: dict[str, str] = {}
ROOMS_LOCK = threading.Condition()


def standin_text(prompt: str, max_new_tokens: int) -> str:
    """The stand-in's 'greedy generation': the prompt reversed, cut to the token budget."""
    return prompt[::-1][:max_new_tokens]


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--disaggregation-mode", choices=["null", "prefill", "decode"], default="null")
    p.add_argument("--disaggregation-transfer-backend", default="mooncake")
    p.add_argument("--disaggregation-bootstrap-port", type=int, default=8998)
    p.add_argument("--engram-offload", choices=["hbm", "dram", "ssd", "off"], default="dram")
    p.add_argument("--enable-metrics", action="store_true")
    args, rest = p.parse_known_args()
    args.rest = rest
    return args


ARGS = _parse()


class Api(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *a: object) -> None:
        sys.stderr.write(f"[standin {ARGS.disaggregation_mode}:{ARGS.port}] {fmt % a}\n")

    def _json(self, obj: object, code: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?")[0]
        if path in ("/health", "/health_generate"):
            return self._json({})
        if path in ("/server_info", "/get_server_info"):
            return self._json(
                {
                    "model_path": ARGS.model_path,
                    "tp_size": ARGS.tp_size,
                    "dp_size": 1,
                    "disaggregation_mode": ARGS.disaggregation_mode,
                    "engram_offload": ARGS.engram_offload,
                    "extra_args": ARGS.rest,
                    "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                }
            )
        if path in ("/model_info", "/get_model_info"):
            return self._json(
                {
                    "model_path": ARGS.model_path,
                    "is_generation": True,
                    "disaggregation_mode": ARGS.disaggregation_mode,
                }
            )
        if path == "/metrics":
            text = ""
            if ARGS.enable_metrics and ARGS.engram_offload != "off":
                text = (
                    "# TYPE sglang:engram_table_bytes gauge\n"
                    f'sglang:engram_table_bytes{{tier="{ARGS.engram_offload}"}} 1048576.0\n'
                    "# TYPE sglang:engram_bytes_read counter\n"
                    f'sglang:engram_bytes_read_total{{tier="{ARGS.engram_offload}"}} 7.0\n'
                )
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        return self._json({"error": f"no route {path}"}, 404)

    def do_POST(self) -> None:  # noqa: N802
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path != "/generate":
            return self._json({"error": f"no route {self.path}"}, 404)
        prompt = req.get("text", "")
        budget = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
        meta = {
            "id": str(req.get("bootstrap_room", "0")),
            "prompt_tokens": len(prompt),
            "finish_reason": {"type": "length", "length": budget},
        }
        mode = ARGS.disaggregation_mode
        if mode == "prefill":
            with ROOMS_LOCK:
                ROOMS[str(req["bootstrap_room"])] = prompt
                ROOMS_LOCK.notify_all()
            return self._json({"text": "", "meta_info": {**meta, "completion_tokens": 0}})
        if mode == "decode":
            url = (
                f"http://{req['bootstrap_host']}:{req['bootstrap_port']}/kv/{req['bootstrap_room']}"
            )
            with urllib.request.urlopen(url, timeout=20) as resp:
                kv = json.loads(resp.read())
            meta.update(prefill_port=kv["prefill_port"], decode_port=ARGS.port)
            prompt = kv["prompt"]
        text = standin_text(prompt, budget)
        return self._json({"text": text, "meta_info": {**meta, "completion_tokens": len(text)}})


class Bootstrap(BaseHTTPRequestHandler):
    """The prefill side's bootstrap server: hands a room's 'KV cache' to the decode side."""

    def log_message(self, fmt: str, *a: object) -> None:
        sys.stderr.write(f"[standin bootstrap:{ARGS.disaggregation_bootstrap_port}] {fmt % a}\n")

    def do_GET(self) -> None:  # noqa: N802
        room = self.path.rsplit("/", 1)[-1]
        deadline = time.monotonic() + 15
        with ROOMS_LOCK:
            while room not in ROOMS and time.monotonic() < deadline:
                ROOMS_LOCK.wait(0.5)
            prompt = ROOMS.pop(room, None)
        code = 200 if prompt is not None else 404
        body = json.dumps({"prompt": prompt, "prefill_port": ARGS.port}).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def main() -> None:
    if ARGS.disaggregation_mode == "prefill":
        boot = ThreadingHTTPServer((ARGS.host, ARGS.disaggregation_bootstrap_port), Bootstrap)
        threading.Thread(target=boot.serve_forever, daemon=True).start()
    ThreadingHTTPServer((ARGS.host, ARGS.port), Api).serve_forever()


if __name__ == "__main__":
    main()
