"""One declaration of the --engram-* options and of the placements: whatever is declared
shows up as a flag, a cluster worker key and a sweep launch key, and passes one check()."""

from __future__ import annotations

import argparse
import random
import string

import pytest
import torch
from sglang_engram.args.flags import add_engram_args, config_from_namespace, placement_choices
from sglang_engram.cluster.spec import WorkerGroup, parse_spec
from sglang_engram.compare.spec import LaunchArgs, parse_sweep_spec
from sglang_engram.protocol.option_rules import check
from sglang_engram.protocol.server_config import OPTIONS, engram_flags
from sglang_engram.protocol.server_options import ServerOption

from engram.errors import EngramConfigError
from engram.placements import DECLARED, Placement, having
from engram.tables import PLACEMENTS, create_table, register_placement
from engram.tables.hbm import HbmTable
from test.plugin.tiny import random_table

CLUSTER = {"name": "t", "model": "/models/tiny", "transfer_backend": "mooncake"}
SWEEP = {"name": "s", "model": "/models/tiny", "workload": {"fixed": {"input_len": 8,
         "output_len": 4}}, "concurrency": [1]}  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_engram_args(parser)
    return parser


def _value(o: ServerOption, rng: random.Random) -> object:
    """A random value the option takes (not its default)."""
    if o.choices is not None:
        return rng.choice([c for c in o.choices() if c != o.default])
    if o.kind is bool:
        return not o.default
    if o.kind is float:
        return round(rng.uniform(0.25, 64.0), 3)
    return "/" + "".join(rng.choices(string.ascii_lowercase, k=8))


def _values_using(o: ServerOption, value: object) -> dict[str, object]:
    """``o`` set to ``value`` with a placement that uses it and what that one needs."""
    values: dict[str, object] = {o.name: value}
    if o.name != "offload" and o.uses is not None:
        values["offload"] = having(o.uses)[0]
    placement = DECLARED[str(values.get("offload", OPTIONS[0].default))]
    for needed in OPTIONS:
        if needed.required_by and getattr(placement, needed.required_by):
            values.setdefault(needed.name, "/needed")
    return values


@pytest.mark.parametrize("o", OPTIONS, ids=lambda o: o.name)
def test_every_declared_option_is_a_flag_a_worker_key_and_a_launch_key(o: ServerOption) -> None:
    rng = random.Random(o.name)
    value = _value(o, rng)
    values = _values_using(o, value)
    assert check(values, flags=True) == []
    flags = engram_flags(**values)
    assert o.flag in flags or o.flag.replace("--", "--no-", 1) in flags
    # the flag parses back to the value, into the config the servers read
    config = config_from_namespace(_parser().parse_args(flags))
    assert getattr(config, o.name) == value
    keys = {f"engram_{k}": v for k, v in values.items()}
    assert o.key in WorkerGroup.model_fields and o.key in LaunchArgs.model_fields
    worker = parse_spec({**CLUSTER, "workers": [{"role": "prefill", **keys}, {"role": "decode"}]})
    assert worker.workers[0].engram_flags == flags
    sweep = parse_sweep_spec({**SWEEP, "configs": [{"name": "a", "launch": keys}]})
    launch = sweep.configs[0].launch
    assert launch is not None and launch.engram_flags == flags


class NvmTable(HbmTable):
    """A throwaway placement: rows held like hbm's, declared to live in files."""

    declaration = Placement(
        "nvm-test", "a placement registered by a test only", files=True, hot_cache=True
    )


@pytest.fixture
def nvm():
    register_placement(NvmTable)
    yield NvmTable.declaration
    PLACEMENTS.pop(NvmTable.placement)
    DECLARED.pop(NvmTable.placement)


def test_a_registered_placement_shows_up_everywhere_without_another_edit(nvm: Placement) -> None:
    name = nvm.name
    assert name in placement_choices()
    offload = next(a for a in _parser()._actions if "--engram-offload" in a.option_strings)
    assert name in offload.choices and nvm.summary in offload.help
    # its traits drive the one check: it needs the directory, takes a hot cache, no RAM cache
    with pytest.raises(EngramConfigError, match=f"--engram-offload {name} needs --engram-ssd-dir"):
        check({"offload": name}, flags=True)
    given = {"offload": name, "ssd_dir": "/d", "hot_cache_gb": 1.0, "ram_cache_gb": 2.0}
    assert check(given, flags=True) == [
        f"--engram-ram-cache-gb is ignored with --engram-offload {name} (it applies to ssd only)"
    ]
    keys = {"engram_offload": name, "engram_ssd_dir": "/d"}
    spec = parse_spec({**CLUSTER, "workers": [{"role": "prefill", **keys}, {"role": "decode"}]})
    assert spec.workers[0].engram_flags == ["--engram-offload", name, "--engram-ssd-dir", "/d"]
    sweep = parse_sweep_spec({**SWEEP, "configs": [
        {"name": "a", "launch": keys}, {"name": "b", "url": "http://h:1", "num_gpus": 1,
                                        "placement": name}]})  # fmt: skip
    assert sweep.configs[1].placement == name
    # and its table serves the rows it was given
    weight, scale = random_table(64, 64)
    ids = torch.randint(0, 64, (40,))
    table = create_table(name, weight, scale, num_rows=64, head_dim=64)
    assert table.declaration is nvm
    reference = create_table("hbm", weight, scale, num_rows=64, head_dim=64)
    assert torch.equal(table.lookup(ids), reference.lookup(ids))


def test_an_unregistered_placement_is_refused_by_the_specs(nvm: Placement) -> None:
    bad = {**CLUSTER, "workers": [{"role": "prefill", "engram_offload": "nvm-tst"}]}
    with pytest.raises(ValueError, match=r"Input should be .*'nvm-test', not 'nvm-tst'"):
        parse_spec(bad)
