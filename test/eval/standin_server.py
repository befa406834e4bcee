"""Stand-in for an SGLang server: its native ``/generate`` (token ids in, token ids out)
answered greedily by the core library's reference model, with the Engram layers on or off
per phase as a deployment would run them (the real PD deployment is tested in
``test/serving/test_pd.py``).

    python -m test.eval.standin_server MODEL_DIR [--decode-engram off]

prints ``port N`` once it listens on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from engram.model.modeling import TinyEngramModel
from engram.model.tokenizer import load_tokenizer


def serve(model_dir: str, prefill_engram: bool, decode_engram: bool) -> None:
    tokenizer = load_tokenizer(model_dir)
    model = TinyEngramModel.from_pretrained(model_dir, "hbm")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _reply(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802
            if self.path != "/generate":
                self.send_error(404)
                return
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            new = model.generate(
                req["input_ids"],
                int(req["sampling_params"].get("max_new_tokens", 16)),
                prefill_engram=prefill_engram,
                decode_engram=decode_engram,
            )
            self._reply({"text": tokenizer.decode(new), "output_ids": new})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"port {server.server_address[1]}", flush=True)
    server.serve_forever()


def main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("model")
    p.add_argument("--prefill-engram", choices=("on", "off"), default="on")
    p.add_argument("--decode-engram", choices=("on", "off"), default="on")
    args = p.parse_args(argv)
    serve(args.model, args.prefill_engram == "on", args.decode_engram == "on")


if __name__ == "__main__":
    main(sys.argv[1:])
