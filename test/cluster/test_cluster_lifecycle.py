"""``up`` with a Ray cluster of its own, stopped while its real SGLang workers are still
starting: by Ctrl-C (it stops everything it started) and by SIGKILL (no teardown runs;
Ray and the kernel take the processes with it). Serving itself is test_cluster_ray.py's.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import psutil
import pytest
from engram_testing.server import build_tiny_model
from sglang_engram.integration.kernel_standin import gpu_present

from test.cluster.util import alive, cluster_env, spec_from_example, start_up, wait_for

# NOTE: the CPU engine's cluster, for machines without a GPU (where setup.sh installs
# the pd-cpu extra); on a GPU machine test_cluster_gpu.py runs the launcher instead.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        gpu_present(), reason="the CPU-engine cluster; on a GPU see test_cluster_gpu.py"
    ),
]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("model") / "tiny-engram")


@pytest.fixture
def starting(tmp_path, model):
    """`up` of the CPU example (own name and ports), returned once both SGLang
    processes run, with every process it has started by then."""
    spec, _ = spec_from_example("pd-cluster-cpu.yaml", tmp_path, model)
    name = spec.stem
    env = cluster_env(tmp_path / "home")
    up = start_up(spec, tmp_path / "home")
    state = tmp_path / "home" / name / "state.json"

    def servers() -> list[int] | None:
        if up.poll() is not None:
            pytest.fail(f"up exited with {up.returncode}: {up.stdout.read()}")
        try:
            members = json.loads(state.read_text())["members"]
        except (OSError, ValueError, KeyError):
            return None
        pids = [members.get(w, {}).get("pid") for w in ("prefill-0", "decode-0")]
        return pids if all(pids) else None

    try:
        pids = wait_for(servers, 600, "both SGLang processes to be started")
        yield {"up": up, "name": name, "env": env, "state": state, "servers": pids}
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(timeout=60)


def _tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def test_ctrl_c_while_the_workers_start_stops_everything(starting):
    up = starting["up"]
    tree = _tree(up.pid)
    assert {p.pid for p in tree} >= set(starting["servers"])  # under up's own Ray
    up.send_signal(signal.SIGINT)
    out, _ = up.communicate(timeout=300)
    assert up.returncode == 130, out
    assert "interrupted; stopping ..." in out
    for name in ("prefill-0", "decode-0"):
        assert f"stopped {name} (pids " in out
    wait_for(lambda: not any(alive(p.pid) for p in tree), 60, "every process of up to end")
    assert not starting["state"].exists()


def test_a_killed_up_takes_its_starting_cluster_with_it(starting):
    up = starting["up"]
    tree = _tree(up.pid) + [q for pid in starting["servers"] for q in _tree(pid)]
    up.kill()  # SIGKILL: no teardown runs
    up.wait(timeout=30)
    wait_for(lambda: not any(alive(p.pid) for p in tree), 120, "every process of up to end")
    out = subprocess.run(
        [sys.executable, "-m", "sglang_engram.cluster", "status", "--name", starting["name"]],
        capture_output=True,
        text=True,
        timeout=120,
        env=starting["env"],
    )
    assert out.returncode == 1 and "is gone" in out.stdout
    assert not starting["state"].exists()
