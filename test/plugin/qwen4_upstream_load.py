"""Load a ``qwen4_exp`` checkpoint with upstream SGLang's own model class, as a scheduler
does on the CPU engine (``ModelConfig`` from the server arguments, the CPU config
adjustments, a one-rank gloo group, upstream's ``load_weights``), and print what it
loaded as JSON. Run as a script in a fresh interpreter with ``SGLANG_USE_CPU_ENGINE=1``
(SGLang reads it at import): ``python -m test.plugin.qwen4_upstream_load MODEL_DIR``."""

from __future__ import annotations

import json
import sys
import warnings

import torch

from test.plugin.upstream_load import one_rank


def load(model_dir: str) -> dict[str, object]:
    warnings.simplefilter("ignore")
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator

    with one_rank(model_dir) as config:
        from sglang.srt.models.qwen4_exp import (
            Qwen4ExpForConditionalGeneration,
            Qwen4ExpNGramEmbedding,
        )

        torch.set_default_dtype(torch.bfloat16)
        model = Qwen4ExpForConditionalGeneration(config.hf_config)
        loaded = model.load_weights(
            safetensors_weights_iterator([f"{model_dir}/model.safetensors"])
        )
        names = {n for n, _ in model.named_parameters()} | {n for n, _ in model.named_buffers()}
        tables = {
            name: {
                "dtype": str(m.ngram_embedding.weight.dtype),
                "rows": m.ngram_embedding.weight.view(torch.uint8).tolist(),
                "weight_scale": m.ngram_embedding.weight_scale.float().tolist(),
                "layer_multipliers": m.layer_multipliers.tolist(),
                "ngram_heads_vocab_sizes": m.ngram_heads_vocab_sizes.tolist(),
                "ngram_heads_offsets": m.ngram_heads_offsets.tolist(),
            }
            for name, m in model.named_modules()
            if isinstance(m, Qwen4ExpNGramEmbedding)
        }
        expert = model.model.layers[0].mlp.experts.w13_weight[1].float().tolist()
    return {
        "not_loaded": sorted(names - loaded),
        "unexpected": sorted(loaded - names),
        "tables": tables,
        "expert1_w13": expert,
        "shared_experts_fused": bool(
            getattr(model.model.layers[0].mlp, "num_fused_shared_experts", 0)
        ),
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(load(sys.argv[1])))
