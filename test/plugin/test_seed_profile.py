"""``--engram-seed-profile``: refused at start in one line unless it fits the served model
and placement; a table opened with it seeds its RAM cache with its own rows."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from sglang_engram.args.startup_checks import EngramStartupError, check_startup
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from engram.fp8 import dequantize_rows
from engram.hashing import NgramHasher
from engram.model.directory import read_config
from engram.profile import HashIdentity, RowProfile, load_tokenizer, make_profile, model_hasher
from engram.rows.seed_rows import fitting
from engram.spec import EngramSpec
from engram.ssd.directory import shard_name
from engram.ssd.row_cache import RowCache
from test.plugin.tiny import random_token_map, tiny_config, write_model_dir
from test.ssd.helpers import write_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "engram" / "assets" / "tiny-engram"
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    """A profile of random text through the bundled tiny model's hash."""
    rng = random.Random()
    text = tmp_path_factory.mktemp("corpus") / "c.txt"
    words = ["".join(rng.choices("abcdefgh ", k=rng.randint(2, 8))) for _ in range(300)]
    text.write_text("\n".join(" ".join(rng.choices(words, k=12)) for _ in range(400)))
    tokenizer = load_tokenizer(TINY)
    hasher = model_hasher(read_config(TINY), tokenizer, str(TINY))
    path = tmp_path_factory.mktemp("profile") / "p.npz"
    make_profile(hasher, tokenizer, [text], top=1000, show_progress=False).save(path)
    return path


def _ssd(tmp_path: Path, profile: Path, **kw) -> EngramServerConfig:
    return EngramServerConfig(
        offload="ssd", ssd_dir=str(tmp_path / "ssd"), seed_profile=str(profile), **kw
    )


def test_a_profile_of_the_served_model_passes(profile, tmp_path) -> None:
    check_startup(get_runtime(), _ssd(tmp_path, profile), model_path=str(TINY))
    assert "seed_profile=" in _ssd(tmp_path, profile).describe()


@pytest.mark.parametrize("offload", ["hbm", "dram", "off"])
def test_another_placement_is_refused_in_one_line(profile, offload) -> None:
    config = EngramServerConfig(offload=offload, seed_profile=str(profile))
    with pytest.raises(EngramStartupError) as exc:
        check_startup(get_runtime(), config, model_path=str(TINY))
    message = str(exc.value)
    assert "\n" not in message
    assert message == (
        f"--engram-seed-profile {profile} seeds the RAM cache of ssd tables, but this "
        f"server's placement is {offload}; pass --engram-offload ssd or leave the profile out"
    )


def test_no_ram_cache_to_seed_is_refused(profile, tmp_path) -> None:
    with pytest.raises(EngramStartupError, match="leaves no RAM cache to seed"):
        check_startup(
            get_runtime(), _ssd(tmp_path, profile, ram_cache_gb=0.0), model_path=str(TINY)
        )


def test_a_profile_of_another_model_is_refused_naming_what_differs(profile, tmp_path) -> None:
    # the same tokenizer, other Engram layers
    other = write_model_dir(tmp_path / "other", dict(read_config(TINY), engram_layer_ids=[0, 2]))
    (other / "tokenizer.json").write_bytes((TINY / "tokenizer.json").read_bytes())
    with pytest.raises(EngramStartupError) as exc:
        check_startup(get_runtime(), _ssd(tmp_path, profile), model_path=str(other))
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"--engram-seed-profile {profile} was not made for {other}: ")
    assert "it profiles layers 1, 3, this model's Engram layers are 0, 2" in message
    # a file that is no profile
    bogus = tmp_path / "bogus.npz"
    bogus.write_bytes(b"PK not really")
    with pytest.raises(EngramStartupError, match="is not an Engram row profile"):
        check_startup(get_runtime(), _ssd(tmp_path, bogus), model_path=str(TINY))


def test_a_model_without_an_engram_hash_is_refused(profile, tmp_path) -> None:
    from sglang_engram.args.startup_checks import check_seed_profile

    with pytest.raises(EngramStartupError, match="has no Engram or PLE hash to profile"):
        check_seed_profile(str(profile), {"model_type": "qwen4_exp"}, str(tmp_path), None)


def test_a_tp_shard_seeds_its_own_rows(sglang_with_plugin, tmp_path: Path) -> None:
    """The profile's global row ids of a layer, the shard's share as its own ids: after
    seeding, the shard serves them from its RAM cache, rows as stored."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.tables.opening import open_layer_table

    fields = tiny_config(layer_ids=(1, 3), n=3, heads=4, head_dim=64)
    model = tmp_path / "model"
    tables = write_checkpoint(model, fields)
    layer = random.choice(fields["engram_layer_ids"])
    weight, scale = tables[layer]
    rows = weight.shape[0]
    start, stop = rows // 3, rows // 3 + rows // 2
    spec = EngramSpec.from_hf_config(fields)
    hasher = NgramHasher(spec, random_token_map(fields["vocab_size"], 90))
    identity = HashIdentity.of(hasher)
    ranked = {
        t.layer: np.random.default_rng().permutation(t.num_rows)[:2000] for t in identity.tables
    }
    counts = {k: np.arange(v.size, 0, -1) for k, v in ranked.items()}
    path = tmp_path / "p.npz"
    RowProfile(identity, 2000, ranked, counts).save(path)
    config = EngramServerConfig(
        offload="ssd", ssd_dir=str(tmp_path / "ssd"), seed_profile=str(path)
    )
    context = create_context(
        ServerArgs(model_path=str(model), device="cpu"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        table = open_layer_table(
            get_runtime(), config, TinyEngram(), layer, rows=(start, stop), head_dim=64, device=CPU,
            shard=shard_name(0, 2),
        )  # fmt: skip
    assert table.wait_seeded(60)
    mine = ranked[layer][(ranked[layer] >= start) & (ranked[layer] < stop)] - start
    # the cache is as large as the shard (the 4 GiB default is more); each set's ways
    # hottest rows fit
    cache = RowCache((stop - start) * table.row_bytes, table.row_bytes)
    fit = fitting(mine, cache.n_sets, cache.ways)
    assert table.stats()["seeded_rows"] == fit.size > 0.9 * mine.size
    ids = torch.from_numpy(fit)
    want = dequantize_rows(weight[start:stop][ids], scale[start:stop][ids])
    assert torch.equal(table.lookup(ids).view(torch.int16), want.view(torch.int16))
    assert table.stats()["lookup_rows_read"] == 0
    table.close()
