"""Load a tiny DeepSeek-V4.1 checkpoint with upstream SGLang's own model class, as a
scheduler does on the CPU engine (``ModelConfig`` from the server arguments, a one-rank
gloo group, upstream's ``load_weights``; Engram tables in ``hbm``: upstream's own
``EngramEmbedding``), and print what it loaded as JSON. Run as a script in a fresh
interpreter with ``SGLANG_USE_CPU_ENGINE=1`` (SGLang reads it at import):
``python -m test.plugin.dsv41_upstream_load MODEL_DIR``."""

from __future__ import annotations

import json
import os
import sys
import warnings

import torch

from test.plugin.upstream_load import one_rank


def _hashes(model: torch.nn.Module) -> dict[str, bool]:
    """The read-ahead's row hasher (the family's, built from the loaded model) against
    upstream's own hash of the model: a prompt from its start, and decode steps from
    their history rows."""
    from sglang.kernels.ops.embeddings.engram_hash import MODE_DECODE, MODE_EXTEND
    from sglang_engram.models.deepseek_v41.family import DeepseekV41

    upstream = model.model.engram_hasher
    ours = DeepseekV41().row_hasher(model)
    n = upstream.max_ngram_size
    ids = torch.randint(3, 2000, (300,))
    positions = torch.arange(ids.numel())
    want, _ = upstream._torch_hash_ids(
        ids, positions, MODE_EXTEND, torch.zeros(1, n - 1, dtype=torch.int32), ids.numel(),
        1, torch.zeros_like(ids), torch.tensor([0]),
    )  # fmt: skip
    steps = [k for k in range(0, ids.numel(), 37)]
    history = torch.tensor(
        [upstream.history_row(ids[max(0, k - n + 1) : k].tolist()) for k in steps]
    )
    want_steps, _ = upstream._torch_hash_ids(
        ids[steps], positions[steps], MODE_DECODE, history, len(steps), 1, None, None
    )
    got_steps = ours.step_rows([ids[max(0, k - n + 1) : k + 1].tolist() for k in steps])
    return {
        "prompt_rows_equal": torch.equal(ours.prompt_rows(ids.tolist()), want),
        "step_rows_equal": torch.equal(got_steps, want_steps),
        "rows_are_ids": bool((want >= 0).all()) and not torch.equal(want[0], want[1]),
    }


def load(model_dir: str) -> dict[str, object]:
    warnings.simplefilter("ignore")
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang_engram.models.deepseek_v41.cpu_engine import ENV_SWITCHES
    from sglang_engram.protocol.runtime import get_runtime
    from sglang_engram.protocol.server_config import EngramServerConfig

    # NOTE: what the plugin's flag hook sets for a server (this script parses no flags)
    os.environ.update(dict.fromkeys(ENV_SWITCHES, "0"))
    get_runtime().use_config(EngramServerConfig(offload="hbm"))
    from sglang.srt.layers.engram import build_compressed_token_map
    from sglang.srt.model_loader.weight_utils import safetensors_weights_iterator
    from sglang.srt.parser.deepseek_recipe_renderer import DeepSeekRecipe
    from sglang.srt.utils.hf_transformers_utils import get_tokenizer

    with one_rank(model_dir) as config:
        from sglang.srt.models.deepseek_v4 import DeepseekV4ForCausalLM
        from sglang_engram.models.deepseek_v41.layers import PlacedEngramEmbedding

        torch.set_default_dtype(torch.bfloat16)
        model = DeepseekV4ForCausalLM(config.hf_config)
        # NOTE: load_weights returns nothing: a parameter still all NaN was not loaded
        for param in model.parameters():
            param.data.view(torch.uint8).fill_(0xFF)
        model.load_weights(safetensors_weights_iterator([f"{model_dir}/model.safetensors"]))
        not_loaded = sorted(
            name for name, p in model.named_parameters() if p.data.view(torch.uint8).eq(0xFF).all()
        )
        upstream = PlacedEngramEmbedding.__base__
        tables = {
            name: {
                "class": type(m).__qualname__,
                "weight": m.weight.view(torch.uint8).tolist(),
                "scale": m.scale.view(torch.uint8).tolist(),
            }
            for name, m in model.named_modules()
            if type(m) is upstream
        }
        hashes = _hashes(model)
        layer = model.model.layers[0]
        tokenizer = get_tokenizer(model_dir)
        _, compressed = build_compressed_token_map(tokenizer)
        # SGLang's DeepSeek-V4.1 chat encoder (/v1/chat/completions) on the shipped tokenizer
        chat = DeepSeekRecipe.from_hf_tokenizer("dsv41", tokenizer).encode(
            {"messages": [{"role": "user", "content": "def main("}], "thinking": False}
        )
    return {
        "not_loaded": not_loaded,
        "tables": tables,
        "expert1_w13": layer.mlp.experts.w13_weight[1].float().tolist(),
        "wqkv_a": layer.self_attn.wqkv_a.weight.float().tolist(),
        "compressed_vocab_size": compressed,
        "decoder_layer": type(layer).__name__,
        "chat_ids": chat,
        **hashes,
        "bos": tokenizer.bos_token_id,
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(load(sys.argv[1])))
