"""Bad --engram-* input: one clear message at startup, before anything loads."""

from __future__ import annotations

import logging
import shutil

import pytest
from engram_testing.plain import total_table_bytes
from sglang_engram.args.startup_checks import (
    EngramStartupError,
    check_hot_cache_fits,
    check_startup,
)
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig

from engram.spec import EngramSpec
from engram.ssd.layout import DiskLayout
from test.plugin.tiny import engram_fields, tiny_config, write_model_dir


@pytest.fixture
def model_dir(tmp_path):
    return str(write_model_dir(tmp_path / "tiny", tiny_config()))


def test_ssd_without_a_directory(model_dir):
    with pytest.raises(EngramStartupError, match="--engram-offload ssd needs --engram-ssd-dir"):
        check_startup(get_runtime(), EngramServerConfig(offload="ssd"), model_path=model_dir)


def test_unknown_ssd_read_strategy_is_named_with_the_choices(model_dir, tmp_path):
    config = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "t"), ssd_read="dirct")
    with pytest.raises(EngramStartupError, match="must be one of mmap, pread, direct, got 'dirct'"):
        check_startup(get_runtime(), config, model_path=model_dir)


def test_ssd_directory_that_is_a_file(model_dir, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(EngramStartupError, match="exists and is not a directory"):
        check_startup(
            get_runtime(),
            EngramServerConfig(offload="ssd", ssd_dir=str(blocker)),
            model_path=model_dir,
        )


def test_ssd_directory_that_cannot_be_written(model_dir, tmp_path):
    # Below a regular file nothing can be created, whoever runs the test (root too).
    target = tmp_path / "a-file" / "tables"
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(EngramStartupError, match=r"tables is not writable \("):
        check_startup(
            get_runtime(),
            EngramServerConfig(offload="ssd", ssd_dir=str(target)),
            model_path=model_dir,
        )


def test_ssd_directory_too_small_says_how_much_is_needed(tmp_path):
    free = shutil.disk_usage(tmp_path).free
    # One layer, 2 orders x 4 heads of primes above `start`: about 8 * start rows.
    head_dim = 256
    start = free // (8 * (head_dim + head_dim // 32)) + 1_000_000
    model = write_model_dir(
        tmp_path / "big", tiny_config(layer_ids=(1,), head_dim=head_dim, vocab_start=start)
    )
    spec = EngramSpec.from_hf_config(
        engram_fields(layer_ids=(1,), head_dim=head_dim, vocab_start=start)
    )
    assert total_table_bytes(spec) > free
    config = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "ssd"))
    with pytest.raises(EngramStartupError) as exc:
        check_startup(get_runtime(), config, model_path=str(model))
    # The tables' size on disk: rows in page-aligned blocks, 3.4 % over the rows' bytes.
    on_disk = DiskLayout(spec.num_embeddings[0], head_dim).file_bytes
    assert on_disk > total_table_bytes(spec) * 1.03
    needed = f"need {on_disk / (1 << 30):.2f} GiB more ({on_disk:,} bytes on disk)"
    assert needed in str(exc.value) and "GiB free" in str(exc.value)


def test_ssd_directory_with_room_passes_and_is_not_created(model_dir, tmp_path):
    # Nothing is created before the server starts: a start that fails later (SGLang's own
    # checks, a missing GPU) must not leave an empty directory behind.
    target = tmp_path / "new" / "ssd"
    check_startup(
        get_runtime(), EngramServerConfig(offload="ssd", ssd_dir=str(target)), model_path=model_dir
    )
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny"]  # no write-test file left


@pytest.mark.parametrize("offload", ["hbm", "dram", "off"])
def test_ram_cache_with_another_placement_warns_in_one_line(model_dir, caplog, offload):
    with caplog.at_level(logging.WARNING):
        check_startup(
            get_runtime(),
            EngramServerConfig(offload=offload, ram_cache_gb=2.0),
            model_path=model_dir,
        )
    [warning] = [r.getMessage() for r in caplog.records if "ram-cache" in r.getMessage()]
    assert warning == (
        f"--engram-ram-cache-gb is ignored with --engram-offload {offload} (it applies to ssd only)"
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING):  # not given: the default says nothing
        check_startup(get_runtime(), EngramServerConfig(offload=offload), model_path=model_dir)
    assert "ram-cache" not in caplog.text


def test_offload_on_a_model_without_engram_warns_once(tmp_path, caplog):
    plain = tiny_config()
    for key in [k for k in plain if k.startswith("engram_")]:
        del plain[key]
    model = write_model_dir(tmp_path / "plain", plain)
    config = EngramServerConfig(offload="ssd", offload_explicit=True)  # ssd dir not needed
    with caplog.at_level(logging.WARNING):
        check_startup(get_runtime(), config, model_path=str(model))
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "has no Engram layers" in warnings[0].getMessage()
    assert "serving it normally" in warnings[0].getMessage()


@pytest.mark.parametrize("role,name", [("prefill", "prefill worker"), ("null", "single server")])
def test_off_where_prompts_are_processed_says_what_is_lost(model_dir, caplog, role, name):
    with caplog.at_level(logging.WARNING):
        check_startup(
            get_runtime(), EngramServerConfig(offload="off", role=role), model_path=model_dir
        )
    assert f"--engram-offload off on a {name}: " in caplog.text
    assert "without the model's n-gram memory" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        check_startup(
            get_runtime(), EngramServerConfig(offload="off", role="decode"), model_path=model_dir
        )
    assert caplog.text == ""


def test_hot_cache_larger_than_free_gpu_memory():
    # The free-memory figure stands in for the NVML query of a GPU machine.
    free = (3 << 30) + 12345
    with pytest.raises(EngramStartupError) as exc:
        check_hot_cache_fits(5.5, free)
    assert str(exc.value).startswith(
        "--engram-hot-cache-gb 5.5 is larger than the GPU's free memory (3.00 GiB)"
    )
    check_hot_cache_fits(2.5, free)


def test_inconsistent_engram_config_is_named(tmp_path):
    cfg = tiny_config()
    cfg["engram_num_embeddings"][0] += 1
    model = write_model_dir(tmp_path / "bad", cfg)
    with pytest.raises(EngramStartupError, match="primes sum to"):
        check_startup(get_runtime(), EngramServerConfig(), model_path=str(model))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"n": 3}, "engram_max_ngram_size is 3: SGLang's Engram hash kernel needs a power of two"),
        ({"heads": 3}, "engram_n_heads is 3: SGLang's Engram hash kernel needs a power of two"),
    ],
)
def test_layouts_sglangs_hash_kernel_cannot_run_are_refused(tmp_path, fields, message):
    model = str(write_model_dir(tmp_path / "m", tiny_config(**fields)))
    with pytest.raises(EngramStartupError, match=message):
        check_startup(get_runtime(), EngramServerConfig(), model_path=model)
    check_startup(
        get_runtime(), EngramServerConfig(offload="off"), model_path=model
    )  # nothing hashed


def test_other_engram_variants_are_refused(tmp_path):
    config = {**tiny_config(), "engram_variant": "paper"}
    model = str(write_model_dir(tmp_path / "m", config))
    with pytest.raises(EngramStartupError, match="engram_variant is 'paper'"):
        check_startup(get_runtime(), EngramServerConfig(offload="hbm"), model_path=model)


def test_ssd_needs_a_local_checkpoint(tmp_path):
    config = EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "ssd"))
    with pytest.raises(EngramStartupError, match="is not a local directory with a config.json"):
        check_startup(get_runtime(), config, model_path="deepseek-ai/DeepSeek-V4.1-Flash")


def test_ssd_check_and_table_open_decide_alike(sglang_with_plugin, tmp_path):
    """The startup check counts, in on-disk bytes, exactly the tables the table open
    then converts: each TP rank's shard, none that is reused after a restart, every one
    converted from another checkpoint (which the open converts again)."""
    from sglang_engram.models.deepseek_v41.family import DeepseekV41
    from sglang_engram.tables.ssd_dirs import checkpoint_source, space_needed, table_dirs

    from engram.ssd.ensure import ensure_table
    from engram.ssd.manifest import TableManifest
    from test.ssd.helpers import write_checkpoint

    fields = engram_fields(layer_ids=(1, 14), n=4, heads=8, head_dim=64)
    config = {"architectures": ["DeepseekV4ForCausalLM"], "vocab_size": 129280, **fields}
    model, other, ssd = tmp_path / "model", tmp_path / "other", tmp_path / "ssd"
    write_checkpoint(model, config, prefix="")
    write_checkpoint(other, config, prefix="")
    spec = EngramSpec.from_hf_config(fields)
    family = DeepseekV41()

    def layer_tables(index, tp_size):
        layer = spec.layer_ids[index]
        return [
            (path, shard.rows)
            for path, shard in table_dirs(ssd, family, config, tp_size)
            if shard.layer_id == layer
        ]

    def needed(checkpoint, tp_size):
        return space_needed(get_runtime().tables, ssd, family, config, str(checkpoint), tp_size)

    def on_disk(index, tp_size):
        return sum(
            DiskLayout(rows[1] - rows[0] if rows else spec.num_embeddings[index], 64).file_bytes
            for _, rows in layer_tables(index, tp_size)
        )

    def open_all(checkpoint, tp_size):
        for index, layer in enumerate(spec.layer_ids):
            for path, rows in layer_tables(index, tp_size):
                ensure_table(
                    path, checkpoint_source(get_runtime().tables, family, checkpoint, layer, rows)
                )

    assert needed(model, 2) == (on_disk(0, 2) + on_disk(1, 2), 0)
    shards = layer_tables(0, 2)  # layer 1, as its two ranks convert it
    for path, rows in shards:
        ensure_table(path, checkpoint_source(get_runtime().tables, family, model, 1, rows))
    assert needed(model, 2) == (on_disk(1, 2), 0)
    assert needed(model, 1) == (on_disk(0, 1) + on_disk(1, 1), 0)
    open_all(model, 2)
    paths = [path for i in (0, 1) for path, _ in layer_tables(i, 2)]
    assert needed(model, 2) == (0, 0)  # a restart reuses them all
    server = EngramServerConfig(offload="ssd", ssd_dir=str(ssd))
    check_startup(get_runtime(), server, model_path=str(model), tp_size=2)

    converted = sum(TableManifest.load(path).data_bytes for path in paths)
    write, stale = needed(other, 2)
    assert write == on_disk(0, 2) + on_disk(1, 2) and stale >= converted
    check_startup(
        get_runtime(), server, model_path=str(other), tp_size=2
    )  # room: the old ones go first
    open_all(other, 2)
    for index, layer in enumerate(spec.layer_ids):  # they now hold the other rows
        for path, rows in layer_tables(index, 2):
            source = checkpoint_source(get_runtime().tables, family, other, layer, rows).identity()
            assert TableManifest.load(path).source == source
    assert needed(other, 2) == (0, 0)
