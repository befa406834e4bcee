"""``--engram-profile-out``: refused at start in one line unless the placement is ssd and
the path can be written; a table opened with it counts the rows its lookups read, a TP
shard only its own, written as rows of the whole layer to its rank's file, and on SIGTERM."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sglang_engram.args.startup_checks import EngramStartupError, check_startup
from sglang_engram.models.engram_qwen3.family import TinyEngram
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.protocol.server_config import EngramServerConfig
from sglang_engram.tables.profile_out import close_all

from engram.model.directory import read_config
from engram.profile import (
    HashIdentity,
    RowProfile,
    TableIdentity,
    load_tokenizer,
    profile_hash,
    rank_path,
)
from engram.spec import EngramSpec
from engram.ssd.directory import shard_name

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "engram" / "assets" / "tiny-engram"
CPU = torch.device("cpu")


def _ssd(tmp_path: Path, out: Path | str) -> EngramServerConfig:
    return EngramServerConfig(offload="ssd", ssd_dir=str(tmp_path / "ssd"), profile_out=str(out))


def test_an_ssd_server_with_a_writable_path_passes(tmp_path) -> None:
    config = _ssd(tmp_path, tmp_path / "new" / "served.npz")
    check_startup(get_runtime(), config, model_path=str(TINY))
    assert f"profile_out={tmp_path / 'new' / 'served.npz'}" in config.describe()
    assert not (tmp_path / "new").exists()  # nothing created before serving


@pytest.mark.parametrize("offload", ["hbm", "dram", "off"])
def test_another_placement_is_refused_in_one_line(offload, tmp_path) -> None:
    out = tmp_path / "served.npz"
    with pytest.raises(EngramStartupError) as exc:
        check_startup(
            get_runtime(),
            EngramServerConfig(offload=offload, profile_out=str(out)),
            model_path=None,
        )
    assert str(exc.value) == (
        f"--engram-profile-out {out} writes the rows ssd tables served, but this server's "
        f"placement is {offload}; pass --engram-offload ssd or leave it out"
    )


def test_a_path_that_cannot_be_written_is_refused(tmp_path) -> None:
    with pytest.raises(EngramStartupError, match="is a directory; give a file name"):
        check_startup(get_runtime(), _ssd(tmp_path, tmp_path), model_path=str(TINY))
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(EngramStartupError, match=f"cannot be written: {blocker} is not a"):
        check_startup(get_runtime(), _ssd(tmp_path, blocker / "served.npz"), model_path=str(TINY))


def test_a_tp_shard_counts_its_own_rows_as_rows_of_the_layer(sglang_with_plugin, tmp_path):
    """Rank 1 of 2 holds rows ``[start, stop)`` of a layer; every rank looks up every id,
    the others' as its row 0 (zeroed after): only its own are counted, and its file
    ``served.tp1of2.npz`` names them as rows of the whole layer."""
    from sglang.srt.runtime_context import SpawnRanks, create_context, use_context
    from sglang.srt.server_args import ServerArgs
    from sglang_engram.forward.placed_table import owned_rows
    from sglang_engram.tables.opening import open_layer_table

    spec = EngramSpec.from_hf_config(read_config(TINY))
    index = random.randrange(spec.n_layers)
    layer, rows = spec.layer_ids[index], spec.num_embeddings[index]
    start = random.randrange(1, rows // 2)
    stop = random.randrange(start + 1, rows)
    out = tmp_path / "served.npz"
    context = create_context(
        ServerArgs(model_path=str(TINY), device="cpu"),
        role="scheduler",
        ranks=SpawnRanks(world_rank=0, dp_rank=None, gpu_id=0),
    )
    with use_context(context):
        table = open_layer_table(
            get_runtime(), _ssd(tmp_path, out), TinyEngram(), layer, rows=(start, stop), head_dim=spec.head_dim,
            device=CPU, shard=shard_name(1, 2),
        )  # fmt: skip
    truth = np.zeros(rows, dtype=np.int64)
    for _ in range(random.randint(3, 10)):
        ids = torch.randint(0, rows, (random.randint(1, 64), spec.n_cols))
        found = torch.empty((*ids.shape, spec.head_dim), dtype=torch.bfloat16)
        owned_rows(table.lookup, ids, start, stop - start, found)  # as the TP shard serves
        np.add.at(truth, ids[(ids >= start) & (ids < stop)].numpy(), 1)
    written = rank_path(out, ".tp1of2")
    identity = profile_hash(TINY, read_config(TINY), load_tokenizer(TINY))[1]
    close_all(get_runtime())
    table.close()
    profile = RowProfile.load(written)
    assert profile.identity == identity
    assert profile.corpus["served_rows"] == truth.sum()
    assert np.array_equal(np.sort(profile.rows[layer]), np.flatnonzero(truth))
    assert np.array_equal(profile.counts[layer], truth[profile.rows[layer]])
    other = [x for x in spec.layer_ids if x != layer][0]
    assert profile.rows[other].size == 0  # this process serves no table of that layer
    assert not out.exists()  # a TP rank writes its own file only


_SERVER = """
import sys, time, numpy as np
from engram.profile import HashIdentity, TableIdentity
from sglang_engram.protocol.runtime import get_runtime
from sglang_engram.tables.profile_out import upkeep_for
identity = HashIdentity("ab" * 8, 3, 4, 0, (TableIdentity(2, 5000, "0" * 16),))
tally = upkeep_for(get_runtime(), sys.argv[1], lambda: identity).tally(2, 0, 5000)
tally.add(np.array([int(i) for i in sys.argv[2].split(",")]))
print("ready", flush=True)
time.sleep(60)
"""


def test_sigterm_writes_the_counts_then_ends_the_process(tmp_path) -> None:
    ids = [random.randrange(5000) for _ in range(random.randint(1, 300))]
    path = tmp_path / "served.npz"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(path), ",".join(map(str, ids))],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)  # NOTE: before the 2 s settle: only the handler writes
    assert proc.wait(timeout=30) == -signal.SIGTERM  # then the signal's own course
    profile = RowProfile.load(path)
    truth = np.bincount(ids, minlength=5000)
    assert np.array_equal(profile.counts[2], truth[profile.rows[2]])
    assert profile.counts[2].sum() == len(ids)


def test_a_reset_writes_and_closes_the_runtimes_served_profiles(tmp_path) -> None:
    """The writers live in the runtime: a reset (serving started over) writes what they
    counted and forgets them; the next table's call makes a new one."""
    from sglang_engram.protocol.runtime import EngramRuntime
    from sglang_engram.tables.profile_out import upkeep_for

    identity = HashIdentity("cd" * 8, 3, 4, 0, (TableIdentity(5, 900, "1" * 16),))
    runtime, path = EngramRuntime(), tmp_path / "served.npz"
    ids = np.random.default_rng().integers(0, 900, size=random.randint(1, 500))
    first = upkeep_for(runtime, path, lambda: identity)
    assert upkeep_for(runtime, path, lambda: identity) is first
    first.tally(5, 0, 900).add(ids)
    runtime.reset()
    assert not runtime.profile_out.upkeeps and runtime.exit_writes  # the exit writes stay
    profile = RowProfile.load(path)
    assert np.array_equal(profile.counts[5], np.bincount(ids, minlength=900)[profile.rows[5]])
    assert upkeep_for(runtime, path, lambda: identity) is not first
    close_all(runtime)
