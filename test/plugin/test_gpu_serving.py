"""PD serving of the tiny Engram model through SGLang on a GPU (skipped without one); the
single-server placements are served in test/serving/test_placements.py, on a GPU or the CPU."""

from __future__ import annotations

import importlib.util
import random

import pytest

from test.serving.server import build_tiny_model, generate, sglang_server

pytestmark = pytest.mark.gpu

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hum".split()


def _prompts(n: int = 6) -> list[str]:
    return [" ".join(random.choices(WORDS, k=random.randint(4, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny-engram")


def _transfer_backend() -> str | None:
    # NOTE: mooncake over TCP: its default protocol is RDMA, which a one-GPU box
    # usually lacks.
    for backend, module in (("nixl", "nixl"), ("mooncake_tcp", "mooncake")):
        if importlib.util.find_spec(module) is not None:
            return backend
    return None


@pytest.mark.parametrize("decode_offload", ["dram", "off"])
def test_prefill_and_decode_servers_match_a_single_server(tiny, tmp_path, decode_offload):
    backend = _transfer_backend()
    if backend is None:
        pytest.skip("no KV transfer backend (mooncake or nixl) installed")
    from test.serving.server import free_port

    prompts = _prompts(4)
    with sglang_server(tiny, log=tmp_path / "single.log") as url:
        single = generate(url, prompts)
    common = ["--disaggregation-transfer-backend", backend, "--mem-fraction-static", "0.3"]
    bootstrap = str(free_port())
    with (
        sglang_server(
            tiny,
            "--disaggregation-mode",
            "prefill",
            *common,
            "--disaggregation-bootstrap-port",
            bootstrap,
            log=tmp_path / "prefill.log",
        ) as prefill,
        sglang_server(
            tiny,
            "--disaggregation-mode",
            "decode",
            *common,
            "--engram-offload",
            decode_offload,
            log=tmp_path / "decode.log",
        ) as decode,
    ):
        from test.plugin.pd import generate_pd

        split = generate_pd(prefill, decode, int(bootstrap), prompts)
    if decode_offload == "dram":
        assert split == single
    else:
        # Decode without Engram changes every token after the first.
        assert [s[:1] for s in split] == [s[:1] for s in single]
