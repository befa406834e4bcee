"""The read-ahead's PLE hash against upstream's own ``Qwen4ExpNGramEmbedding``: built on
the CPU at TP 1 in a runtime context from a tiny config, with the checkpoint's constants
loaded into its buffers, hashing random token streams with EOS inside, prompt at once
and in chunked-prefill splits (the 2-token context carried between chunks)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
import torch

from engram.ple_hashing import PleLayerHash, PleRowHasher

NGRAM = 3
HEADS = 8


@pytest.fixture
def upstream_layers(cpu_context):
    """Two PLE layers as upstream builds them, their buffers then overwritten as the
    checkpoint's would be (odd multipliers, sizes and offsets unlike the computed ones)."""
    from sglang.srt.configs.qwen4_exp import Qwen4ExpTextConfig
    from sglang.srt.models.qwen4_exp import Qwen4ExpNGramEmbedding

    vocab = random.randint(200, 5000)
    eos = random.randrange(vocab)
    config = Qwen4ExpTextConfig(
        vocab_size=vocab,
        hidden_size=64,
        ple_layer_ids=sorted(random.sample(range(2, 12), 2)),
        ple_embed_dim=(NGRAM - 1) * HEADS * 8,
        ngram_size=NGRAM,
        heads_per_ngram=HEADS,
        ngram_vocab_size_base=random.randint(300, 900),
        eos_token_id=eos,
    )
    layers = []
    for index, ple_id in enumerate(config.ple_layer_ids):
        embedding = Qwen4ExpNGramEmbedding(config, config.ple_embed_dim, ple_layer_index=index)
        columns = (NGRAM - 1) * HEADS
        sizes = torch.randint(50, 5000, (columns,))
        with torch.no_grad():
            embedding.layer_multipliers.copy_(torch.randint(1, 1 << 62, (NGRAM,)) | 1)
            embedding.ngram_heads_vocab_sizes.copy_(sizes)
            embedding.ngram_heads_offsets.copy_(torch.cumsum(sizes, 0) - sizes)
        layers.append((ple_id - 1, embedding))
    return layers, eos, vocab


def _ours(layers, eos: int) -> PleRowHasher:
    return PleRowHasher(
        [
            PleLayerHash(
                layer_id,
                emb.layer_multipliers.clone(),
                emb.ngram_heads_vocab_sizes.clone(),
                emb.ngram_heads_offsets.clone(),
            )
            for layer_id, emb in layers
        ],
        NGRAM,
        eos,
    )


def _upstream_chunked(embedding, stream: torch.Tensor, cuts: list[int], eos: int) -> torch.Tensor:
    """Upstream's ids, chunk by chunk: each chunk's windows over the request's carried
    2-token context (EOS at the start), as its prefill builds them."""
    from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    # NOTE: SGLang's own request pool; the namespace stands in for an attention
    # backend, the one field the hash reads through the forward context.
    pool = ReqToTokenPool(size=4, max_context_len=64, device="cpu", enable_memory_saver=False)
    backend = SimpleNamespace(req_to_token_pool=pool)
    history = torch.full((NGRAM - 1,), eos, dtype=torch.int64)
    out = []
    with forward_context(ForwardContext(attn_backend=backend)):
        for chunk in torch.tensor_split(stream, cuts):
            if not chunk.numel():
                continue
            context = torch.cat([history, chunk])
            pool.ple_window_cache = None
            out.append(embedding._hash_contexts(context.unfold(0, NGRAM, 1)))
            history = context[-(NGRAM - 1) :]
    return torch.cat(out)


def _stream_with_eos(vocab: int, eos: int) -> torch.Tensor:
    stream = torch.randint(0, vocab, (random.randint(1, 300),))
    where = torch.rand(stream.shape) < random.choice([0.05, 0.2, 0.5])
    stream[where] = eos  # single and adjacent EOS, at the start and the end too
    return stream


def test_prompt_ids_equal_upstreams_whole_and_in_chunks(upstream_layers) -> None:
    layers, eos, vocab = upstream_layers
    ours = _ours(layers, eos)
    for _ in range(20):
        stream = _stream_with_eos(vocab, eos)
        rows = ours.prompt_rows(stream.tolist())
        assert rows.shape == (stream.numel(), len(layers), (NGRAM - 1) * HEADS)
        cuts = sorted(random.sample(range(1, stream.numel() + 1), min(3, stream.numel())))
        for index, (_, embedding) in enumerate(layers):
            whole = _upstream_chunked(embedding, stream, [], eos)
            chunked = _upstream_chunked(embedding, stream, cuts, eos)
            assert torch.equal(whole, chunked)  # upstream's own chunking is consistent
            assert torch.equal(rows[:, index], whole)


def test_decode_step_ids_equal_the_prompts(upstream_layers) -> None:
    """One decode step hashes a request's newest token from its last 3 tokens (fewer at
    the request start) exactly as the prompt pass hashed it."""
    layers, eos, vocab = upstream_layers
    ours = _ours(layers, eos)
    stream = _stream_with_eos(vocab, eos).tolist()
    tails = [stream[max(0, t - NGRAM + 1) : t + 1] for t in range(len(stream))]
    assert torch.equal(ours.step_rows(tails), ours.prompt_rows(stream))


def test_loaded_constants_are_used_not_recomputed(upstream_layers) -> None:
    """The buffers differ from what upstream computes for the config (the checkpoint's
    win), and changing one multiplier changes our ids: they are read, not derived."""
    layers, eos, vocab = upstream_layers
    stream = _stream_with_eos(vocab, eos).tolist()
    before = _ours(layers, eos).prompt_rows(stream)
    layer_id, embedding = layers[0]
    with torch.no_grad():
        embedding.layer_multipliers[0] += 2
    after = _ours(layers, eos).prompt_rows(stream)
    assert not torch.equal(before[:, 0], after[:, 0]) and torch.equal(before[:, 1], after[:, 1])


def test_computed_constants_equal_upstreams(cpu_context) -> None:
    """Where a checkpoint carries no PLE buffers, the profile computes them: upstream's
    own at construction (SplitMix64 of the config's seed and the layer's index, the
    primes from ``ngram_vocab_size_base``), for random configs."""
    from sglang.srt.configs.qwen4_exp import Qwen4ExpTextConfig
    from sglang.srt.models.qwen4_exp import Qwen4ExpNGramEmbedding

    from engram.profile.ple_model import upstream_multipliers
    from engram.ssd.checkpoint_formats.ple_config import PleConfig

    fields = {
        "vocab_size": random.randint(200, 200_000),
        "hidden_size": 64,
        "ple_layer_ids": sorted(random.sample(range(2, 12), 3)),
        "ple_embed_dim": (NGRAM - 1) * HEADS * 8,
        "ngram_size": NGRAM,
        "heads_per_ngram": HEADS,
        "ngram_vocab_size_base": random.randint(300, 90_000),
        "eos_token_id": 1,
        "seed": random.randrange(1 << 40),
    }
    config = Qwen4ExpTextConfig(**fields)
    ple = PleConfig.from_config(fields)
    for index, layer in enumerate(ple.layer_ids):
        upstream = Qwen4ExpNGramEmbedding(config, config.ple_embed_dim, ple_layer_index=index)
        ours = upstream_multipliers(NGRAM, fields["vocab_size"], fields["seed"], index)
        assert torch.equal(ours, upstream.layer_multipliers)
        sizes = torch.tensor(ple.head_sizes(layer))
        assert torch.equal(sizes, upstream.ngram_heads_vocab_sizes)
        assert torch.equal(torch.cumsum(sizes, 0) - sizes, upstream.ngram_heads_offsets)
        assert upstream.ngram_embedding.num_embeddings == ple.num_rows(layer)


def test_a_ragged_batch_hashes_as_each_piece_does(upstream_layers) -> None:
    """``hash_batch`` (the profile's counting): pieces back to back, each after its
    history (none: the request's start), as the pieces hashed one by one."""
    layers, eos, vocab = upstream_layers
    ours = _ours(layers, eos)
    streams = [_stream_with_eos(vocab, eos) for _ in range(random.randint(1, 6))]
    histories = torch.full((len(streams), NGRAM - 1), -1, dtype=torch.int64)
    want = []
    for i, stream in enumerate(streams):
        context = torch.randint(0, vocab, (random.randint(0, NGRAM - 1),))
        if context.numel():
            histories[i, NGRAM - 1 - context.numel() :] = context
        want.append(ours.rows_of_windows(ours.windows(stream, context.tolist())))
    lengths = torch.tensor([s.numel() for s in streams])
    got = ours.hash_batch(torch.cat(streams), lengths, histories)
    assert torch.equal(got, torch.cat(want))
