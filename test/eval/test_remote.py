"""engram.eval ablate --url against real SGLang servers (SGLang's CPU engine on a machine
without a GPU): one started with ``--engram-offload dram`` decodes as the local ``both``
regime, one with ``--engram-offload off`` as ``none`` (a PD deployment whose decode
workers run ``off``, the local ``prefill_only``, is tested with the PD tests).

``--url`` scores greedy exact match, and a server's bf16 kernels may break an exact
logit tie the other way than the reference model does. So each server's own greedy
tokens are first checked against the reference, teacher-forced (every one the
reference's best within ``engram_testing.reference.TIE``); then ``--url``'s score must be
the share of samples the server's tokens match, and the local score may differ from it
only by samples on which the server's path and the reference's greedy path part (at a
tie, by the first check).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from engram_testing.client import generate_ids
from engram_testing.reference import agreement, load_reference
from engram_testing.server import sglang_server

from engram.eval import REGIMES, Sample, ablate
from engram.eval.__main__ import main
from engram.eval.remote import remote_exact_match

K = 6
SERVED_AS = {"dram": "both", "off": "none"}


@pytest.fixture(scope="module")
def trained(trained_tiny_model):
    """The bundled trained tiny model: its directory and the reference model on it."""
    model_dir = trained_tiny_model
    model = load_reference(model_dir)
    yield model_dir, model
    model.close()


@contextlib.contextmanager
def _servers(model: Path, logs: Path, *offloads: str) -> Iterator[list[str]]:
    """Real SGLang servers of ``model``, one per offload, each started once the one before
    is healthy (two starting side by side on a loaded 2-core CI host have had one's
    warmup give up after its 120 tries)."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(
                sglang_server(
                    model,
                    "--engram-offload",
                    offload,
                    log=logs / f"{offload}.log",
                    timeout_s=900,
                )
            )  # fmt: skip
            for offload in offloads
        ]


def _samples(model, n_both: int, n_none: int, rng: random.Random) -> list[Sample]:
    """Prompts of fresh random ids, continued by the reference's own greedy tokens with
    Engram on (``n_both``) or off (``n_none``); no continuation ends early."""
    out = []
    while len(out) < n_both + n_none:
        prompt = [rng.randrange(3, model.config.vocab_size) for _ in range(rng.randint(6, 24))]
        on = len(out) < n_both
        cont = model.generate(prompt, K, prefill_engram=on, decode_engram=on)
        if len(cont) == K and model.config.eos_token_id not in cont:
            out.append(Sample(prompt, cont))
    return out


@pytest.mark.slow
def test_url_mode_scores_what_each_server_decodes(trained, tmp_path):
    model_dir, tiny = trained
    samples = _samples(tiny, 5, 3, random.Random())
    local = ablate(tiny, samples, K, {r: REGIMES[r] for r in SERVED_AS.values()}).regimes
    # 5 samples are both's greedy path, 3 none's, and the regimes' paths part.
    assert local["both"].exact_match > local["none"].exact_match
    with _servers(model_dir, tmp_path, *SERVED_AS) as urls:
        for url, (offload, regime) in zip(urls, SERVED_AS.items(), strict=True):
            served = [generate_ids(url, s.prompt, K) for s in samples]
            for s, ids in zip(samples, served, strict=True):
                a = agreement(tiny, s.prompt, ids, regime)
                assert a.all_agree, f"{offload} server vs {regime}: {a}"
            matched = [ids == s.continuation for s, ids in zip(samples, served, strict=True)]
            remote = remote_exact_match(url, samples, K).exact_match
            assert remote == pytest.approx(sum(matched) / len(samples)), offload
            regime_r = REGIMES[regime]
            parted = sum(
                ids != tiny.generate(s.prompt, K, prefill_engram=regime_r.prefill,
                                     decode_engram=regime_r.decode)
                for s, ids in zip(samples, served, strict=True)
            )  # fmt: skip
            gap = abs(remote - local[regime].exact_match) * len(samples)
            assert gap <= parted + 1e-9, (offload, remote, local[regime], parted)
            assert parted <= len(samples) // 2, f"{offload}: ties on {parted} samples"


def test_unreachable_url_is_one_clear_line(tiny_dir, capsys):
    argv = ["ablate", "--model", str(tiny_dir), "--url", "http://127.0.0.1:9"]
    assert main([*argv, "--data", __file__, "--max-samples", "2"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot reach http://127.0.0.1:9 ")
