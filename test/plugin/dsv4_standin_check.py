"""Check the DeepSeek-V4 CPU stand-ins against upstream SGLang's own references, in a
fresh interpreter on SGLang's CPU engine with Triton's interpreter on, so that upstream's
Triton kernels (the K quantiser and page store, RoPE, the Sinkhorn split, the stream
combine, the norm+RoPE) run on the CPU as references. Prints ``RESULT`` and a JSON
object: each check's name -> ``"ok"`` or why not.

    SGLANG_USE_CPU_ENGINE=1 TRITON_INTERPRET=1 python -m test.plugin.dsv4_standin_check
"""

from __future__ import annotations

import json
import os
import time
import traceback
import warnings
from collections.abc import Callable

import torch
from sglang_engram.models.deepseek_v41.cpu_engine import ENV_SWITCHES

CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def _k_rows(tokens: int) -> torch.Tensor:
    """bf16 K rows whose 64-value tiles span magnitudes (every exponent path)."""
    scale = torch.exp2(torch.randint(-8, 6, (tokens, 8, 1)).float())
    return (torch.randn(tokens, 8, 64) * scale).flatten(1).to(torch.bfloat16)


def _pages(pages: int, page_size: int) -> torch.Tensor:
    """A V4 pool layer's bytes (pages padded to 576-byte rows, as the pool makes them)."""
    per_page = -(-page_size * 584 // 576) * 576
    return torch.randint(0, 255, (pages, per_page), dtype=torch.uint8)


def _pack(k: torch.Tensor):
    """Upstream's pack of K as the stand-in quantises it (checked against upstream's
    quantiser below; Triton's interpreter rounds to e4m3 wrongly, so upstream's own
    quantiser cannot write caches here)."""
    from sglang.kernels.ops.kvcache.dsv4_main_kv_store import NopeFp8RopeBf16Pack
    from sglang_engram.integration.kernel_standin.dsv4 import k_cache

    return NopeFp8RopeBf16Pack(*k_cache.quantize(k))


@check
def k_quantize_picks_upstreams_exponents_and_rounds_to_nearest() -> None:
    """The exponents and the bf16 RoPE bytes are upstream's Triton quantiser's; each e4m3
    value is the nearest one to the K value under its tile's exponent (as the GPU's
    conversion rounds; Triton's interpreter does not convert to e4m3 faithfully)."""
    from sglang.test.kernels.deepseek_v4.k_cache_reference import (
        quant_to_nope_fp8_rope_bf16_pack_triton,
    )
    from sglang_engram.integration.kernel_standin.dsv4 import k_cache

    k = _k_rows(97)
    want = quant_to_nope_fp8_rope_bf16_pack_triton(k)
    nope, rope, scale = k_cache.quantize(k)
    assert torch.equal(scale, want.scale_k_nope_ue8m0)
    assert torch.equal(rope.view(torch.int16), want.k_rope_bf16.view(torch.int16))
    x = k[:, :448].float().unflatten(-1, (7, 64)) / torch.exp2(scale.float() - 127).unsqueeze(-1)
    got = nope.float().unflatten(-1, (7, 64))
    grid = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    grid = grid[grid.isfinite()]
    nearest = (x.unsqueeze(-1) - grid).abs().min(-1).values
    assert torch.equal((x - got).abs(), nearest)


@check
def k_store_equals_upstream_torch_and_triton() -> None:
    from sglang.kernels.ops.kvcache.dsv4_main_kv_store import _set_k_and_s_triton
    from sglang.test.kernels.deepseek_v4.k_cache_reference import set_k_and_s_torch
    from sglang_engram.integration.kernel_standin.dsv4 import k_cache

    page_size, pages = 64, 5
    loc = torch.randperm(page_size * pages)[:70]
    pack = _pack(_k_rows(70))
    start = _pages(pages, page_size)
    ours, torch_ref, triton_ref = start.clone(), start.clone(), start.clone()
    k_cache.store(ours, loc, pack.k_nope_fp8, pack.k_rope_bf16, pack.scale_k_nope_ue8m0, page_size)
    set_k_and_s_torch(torch_ref, loc, pack, page_size)
    _set_k_and_s_triton(triton_ref, loc, pack, page_size)
    assert torch.equal(ours, torch_ref) and torch.equal(ours, triton_ref)
    assert not torch.equal(ours, start)


@check
def k_load_equals_upstream_dequant_reference() -> None:
    from sglang.test.kernels.deepseek_v4.k_cache_reference import (
        dequantize_k_cache_paged_ref,
        set_k_and_s_torch,
    )
    from sglang_engram.integration.kernel_standin.dsv4 import k_cache

    page_size, pages = 256, 3
    cache = _pages(pages, page_size)
    loc = torch.randperm(page_size * pages)[:300]
    set_k_and_s_torch(cache, loc, _pack(_k_rows(300)), page_size)
    want = dequantize_k_cache_paged_ref(cache, loc, page_size)[:, 0]
    got = k_cache.load(cache, loc, page_size)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@check
def k_norm_rope_equals_upstream_triton() -> None:
    """The normed and rotated K the store quantises, against upstream's Triton norm+RoPE
    on fp32 rows (fp32 in, fp32 out: no rounding between them)."""
    from sglang.kernels.ops.attention.dsv4.rope import (
        fused_norm_rope_inplace_triton,
        precompute_freqs_cis,
    )
    from sglang_engram.integration.kernel_standin.dsv4 import k_cache

    freqs = precompute_freqs_cis(64, 4096, 0, 10000.0, 1.0, 32, 1)
    kv = torch.randn(40, 512) * 3
    weight = 1 + 0.1 * torch.randn(512)
    positions = torch.randint(0, 4096, (40,))
    want = kv.clone()
    fused_norm_rope_inplace_triton(want, weight, 1e-6, freqs, positions)
    got = k_cache.norm_rope(kv, weight, 1e-6, freqs, positions)
    torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6)


@check
def rope_equals_upstream_triton() -> None:
    """Forward and inverse, on fp32 rows (upstream's kernel computes in fp32 and stores
    in the row's dtype; Triton's interpreter truncates where the GPU rounds)."""
    from sglang.kernels.ops.attention.dsv4.rope import (
        apply_rotary_emb_triton,
        precompute_freqs_cis,
    )
    from sglang_engram.integration.kernel_standin.dsv4.rope import rotate_inplace

    freqs = precompute_freqs_cis(64, 4096, 0, 10000.0, 1.0, 32, 1)
    positions = torch.randint(0, 4096, (9,))
    for inverse in (False, True):
        q = torch.randn(9, 4, 512)
        ours, ref = q.clone(), q.clone()
        rotate_inplace(ours[..., -64:], freqs, positions, inverse=inverse)
        apply_rotary_emb_triton(ref[..., -64:], freqs, positions=positions, inverse=inverse)
        assert torch.equal(ours, ref), inverse
        assert torch.equal(ours[..., :-64], q[..., :-64]) and not torch.equal(ours, q)


@check
def sinkhorn_equals_upstream_references() -> None:
    from sglang.kernels.ops.layernorm.mhc import _hc_split_sinkhorn_triton
    from sglang.test.kernels.mhc import hc_split_sinkhorn_torch
    from sglang_engram.integration.kernel_standin.dsv4.mhc import split_sinkhorn

    hc = 4
    mixes = torch.randn(3, 11, (2 + hc) * hc)
    scale, base = torch.rand(3) + 0.5, torch.randn((2 + hc) * hc)
    ours = split_sinkhorn(mixes, scale, base, hc, 20, 1e-6)
    for ref in (
        hc_split_sinkhorn_torch(mixes, scale, base, hc, 20, 1e-6),
        _hc_split_sinkhorn_triton(mixes, scale, base, hc, 20, 1e-6),
    ):
        for a, b in zip(ours, ref, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ours[2].sum(-2), torch.ones(3, 11, hc), rtol=0, atol=1e-4)


@check
def combine_equals_upstream_triton() -> None:
    """fp32 out: the same accumulation, bit for bit; bf16 out: rounded once more."""
    from sglang.kernels.ops.layernorm.mhc import mhc_combine as upstream_combine
    from sglang_engram.integration.kernel_standin.dsv4.mhc import combine

    x = torch.randn(19, 4 * 256).to(torch.bfloat16)
    pre = torch.rand(19, 4)
    upstream = getattr(upstream_combine, "__wrapped__", upstream_combine)  # not the hook
    want = upstream(x, pre, 4, torch.float32)
    assert torch.equal(combine(x, pre, 4, torch.float32), want)
    assert torch.equal(combine(x, pre, 4, torch.bfloat16), want.to(torch.bfloat16))


@check
def sparse_attention_equals_a_per_query_softmax() -> None:
    """Beyond the kit's cases: -1 and past-``topk_length`` entries skipped, a slot named
    twice counted twice, a second (extra) cache, queries past one block: against each
    query's softmax over upstream's dequantised keys plus the sink."""
    from sglang.test.kernels.deepseek_v4.k_cache_reference import (
        dequantize_k_cache_paged_ref,
        set_k_and_s_torch,
    )
    from sglang_engram.integration.kernel_standin.dsv4 import sparse_mla

    page_size, heads, queries, topk = 64, 4, sparse_mla.BLOCK + 30, 64
    caches = []
    for pages in (3, 2):
        cache = _pages(pages, page_size)
        loc = torch.arange(pages * page_size)
        set_k_and_s_torch(cache, loc, _pack(_k_rows(loc.numel())), page_size)
        caches.append((cache, torch.randint(0, pages * page_size, (queries, 1, topk))))
    (main, idx), (extra, extra_idx) = caches
    idx[:, 0, 5] = -1
    idx[:, 0, 7] = idx[:, 0, 6]  # the same slot twice
    lengths = torch.randint(1, topk + 1, (queries,))
    extra_lengths = torch.randint(1, topk + 1, (queries,))
    q = torch.randn(queries, 1, heads, 512).to(torch.bfloat16)
    sink = torch.randn(heads)
    views = [
        c.view(c.shape[0], -1)[:, : page_size * 584].view(c.shape[0], page_size, 1, 584)
        for c in (main, extra)
    ]
    out, _ = sparse_mla.sparse_decode(
        q, views[0], 512, 512**-0.5, idx, lengths, sink, views[1], extra_idx, extra_lengths
    )
    # NOTE: a sample of the queries, the last one (second block) among them
    for i in [*torch.randperm(queries - 1)[:23].tolist(), queries - 1]:
        chosen = [s for s in idx[i, 0, : lengths[i]].tolist() if s >= 0]
        more = extra_idx[i, 0, : extra_lengths[i]]
        keys = torch.cat((
            dequantize_k_cache_paged_ref(main, torch.tensor(chosen), page_size)[:, 0],
            dequantize_k_cache_paged_ref(extra, more, page_size)[:, 0],
        )).float()  # fmt: skip
        scores = q[i, 0].float() @ keys.T * 512**-0.5
        probs = torch.softmax(torch.cat((scores, sink.view(-1, 1)), dim=-1), dim=-1)[:, :-1]
        torch.testing.assert_close(out[i, 0].float(), probs @ keys, rtol=2e-2, atol=2e-2)


def _kit_check(case) -> Callable[[], None]:
    def run() -> None:
        from sglang.test.kits.attention_unittest.attention_methods import dsv4_attention as kit

        class Case:
            def skipTest(self, why: str) -> None:  # noqa: N802 - unittest's name
                raise AssertionError(f"the kit skipped the case: {why}")

        # NOTE: the kit writes its K cache through upstream's Triton quantiser; here
        # through the stand-in's (checked against it above), stored by the stand-in's
        # SetKAndS; the kit's reference reads the bf16 K it projected
        kit.quant_to_nope_fp8_rope_bf16_pack_triton = _pack
        kit.run_dsv4_attention_case(Case(), case, device="cpu")

    return run


def main() -> None:
    warnings.simplefilter("ignore")
    os.environ.update(dict.fromkeys(ENV_SWITCHES, "0"))  # as the plugin sets for a server
    import sglang.srt.server_args  # noqa: F401 - the launcher's import order
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs

    torch.manual_seed(0)
    context = create_context(
        ServerArgs(model_path="dummy", device="cpu"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        from sglang.test.kits.attention_unittest.attention_methods import dsv4_attention as kit

        for case in kit.make_dsv4_cases("dsv4"):
            CHECKS[f"kit:{case.name}"] = _kit_check(case)
        results = {}
        for name, fn in CHECKS.items():
            start = time.monotonic()
            try:
                fn()
                results[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported per check
                results[name] = f"{type(exc).__name__}: {exc}"[:2000]
                traceback.print_exc()
            print(f"{name}: {time.monotonic() - start:.1f} s", flush=True)
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
