"""Deployments a sweep measures: ``launch`` (one SGLang server it starts and stops),
``cluster`` (``python -m sglang_engram.cluster up``, torn down after) or ``url`` (run
by someone else). Each gives a :class:`Target`: the URL the benchmark sends to, every
GPU it uses, its placement and the servers whose ``/metrics`` carry Engram counters.

The server command is ``python -m sglang.launch_server``; ``SERVER_CMD_ENV`` replaces
it (shell words), as the tests do to start a stand-in server that dies on purpose. On a
``device: cpu`` sweep a launch config's server runs on SGLang's CPU engine.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import yaml

from sglang_engram.cluster.keys import bearer, read_key
from sglang_engram.compare.spec import ConfigSpec, SweepSpec
from sglang_engram.integration.cpu_serving import CPU_ENGINE_VAR
from sglang_engram.server_process import probe, stop_group

SERVER_CMD_ENV = "SGLANG_ENGRAM_COMPARE_SERVER_CMD"
# NOTE: a small KV pool (SGLang's CPU engine would size it at ~72 % of free host
# memory and take ~30 s to allocate it) and no scheduler busy-polling while idle (half
# a core each otherwise). A --max-total-tokens in a config's extra_args comes later, so
# it wins.
CPU_SERVER_ARGS = ("--device", "cpu", "--max-total-tokens", "32768", "--sleep-on-idle")
CLUSTER = [sys.executable, "-m", "sglang_engram.cluster"]


class DeploymentError(RuntimeError):
    """A config that cannot start; the message is one line naming it."""


@dataclass(frozen=True)
class Target:
    url: str
    num_gpus: int  # 0 on a cpu sweep
    placement: str
    metrics_urls: tuple[str, ...]
    sku: str | None = None  # stated by a url config; else detected
    hosts: int = 1  # machines the servers run on (what a CPU point's throughput is per)
    local: bool = True  # the servers run on this host (its CPU cores are theirs)
    key: str | None = None  # what the benchmark sends (a cluster's client key)


class Deployment:
    """Base: a url config (nothing to start or stop)."""

    def __init__(self, config: ConfigSpec, spec: SweepSpec, run_dir: Path):
        self.config, self.spec, self.run_dir = config, spec, run_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = run_dir / "servers" / f"{config.name}.log"

    def start(self) -> Target:
        c = self.config
        assert c.url is not None and c.placement is not None
        metrics = tuple(c.metrics_urls) or (c.url,)
        return Target(c.url.rstrip("/"), c.num_gpus or 0, c.placement, metrics, c.sku, local=False)

    def dead(self) -> str | None:
        """Why the deployment can no longer serve, or None."""
        if self.proc is not None and self.proc.poll() is not None:
            return f"server process exited with code {self.proc.returncode} (log: {self.log})"
        return None

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, 60)
            self.proc = None

    def _spawn(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            log.write(f"\n$ {shlex.join(argv)}\n".encode())
            log.flush()
            # NOTE: its own session, so stopping it also stops the schedulers it forks.
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
            )

    def _wait_ready(self, url: str, timeout_s: float, key_file: Path | None = None) -> None:
        """Until ``url`` answers (asked with the key in ``key_file`` once it exists)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                self.proc = None
                raise DeploymentError(
                    f"config {self.config.name} could not start: its process exited "
                    f"before {url} was ready ({_last_line(self.log)}; log: {self.log})"
                )
            key = read_key(key_file) if key_file is not None and key_file.exists() else None
            if (key_file is None or key) and probe(url, timeout_s=5, headers=bearer(key)):
                return
            time.sleep(1)
        self.stop()
        raise DeploymentError(
            f"config {self.config.name} could not start: {url} not ready within "
            f"{timeout_s:.0f} s (log: {self.log})"
        )


class LaunchDeployment(Deployment):
    def start(self) -> Target:
        a = self.config.launch
        assert a is not None
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        cpu = self.spec.device == "cpu"
        env = {**os.environ, CPU_ENGINE_VAR: "1"} if cpu else None
        self._spawn([*server_command(), *self.server_args(port)], env)
        self._wait_ready(url + "/health", a.startup_timeout_s)
        gpus = 0 if cpu else a.tp_size * _flag_int(a.extra_args, ("--dp-size", "--dp"), 1)
        return Target(url, gpus, a.engram_offload, (url,), self.config.sku)

    def server_args(self, port: int) -> list[str]:
        a = self.config.launch
        assert a is not None
        args = ["--model-path", self.spec.model, "--host", "127.0.0.1", "--port", str(port)]
        args += ["--tp-size", str(a.tp_size), *a.engram_flags]
        if self.spec.device == "cpu":
            args += CPU_SERVER_ARGS
        return [*args, "--enable-metrics", *a.extra_args]


class ClusterDeployment(Deployment):
    """``cluster up SPEC`` in the foreground (it stops everything on SIGINT); the
    deployment is read from ``cluster plan SPEC --json``."""

    def start(self) -> Target:
        spec_file = self._spec_file()
        plan = _plan(spec_file, self.config.name)
        self.name = plan["name"]
        workers = plan["workers"]
        self._spawn([*CLUSTER, "up", str(spec_file)])
        router = plan["router"]["url"].rstrip("/")
        key_file = Path(plan["client_key_file"])  # NOTE: `up` makes it before any worker
        self._wait_ready(router + "/v1/models", 3600.0, key_file)
        roles = dict.fromkeys(f"{w['role']}:{w['engram_offload']}" for w in workers)
        gpus = sum(int(w["gpus"]) for w in workers)
        metrics = tuple(w["url"].rstrip("/") for w in workers)
        hosts = {w["host"] for w in workers}
        local = all(_is_local(h) for h in hosts)
        key = read_key(key_file)
        return Target(
            router, gpus, "+".join(roles), metrics, self.config.sku, len(hosts), local, key
        )

    def stop(self) -> None:
        if self.proc is None:
            return
        # NOTE: SIGINT to `up` alone: it tears down its workers and Ray in order.
        if not stop_group(self.proc, 180, sig=signal.SIGINT, leader_only=True).on_signal:
            # NOTE: the backstop for an `up` that did not stop its workers in time.
            subprocess.run([*CLUSTER, "down", "--name", self.name], timeout=300, check=False)
        self.proc = None

    def _spec_file(self) -> Path:
        cluster = self.config.cluster
        if isinstance(cluster, dict):
            path = self.run_dir / "clusters" / f"{self.config.name}.yaml"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(yaml.safe_dump(cluster, sort_keys=False))
            return path
        assert isinstance(cluster, str)
        path = Path(self.spec.base_dir) / cluster
        if not path.is_file():
            raise DeploymentError(f"config {self.config.name}: no cluster spec at {path}")
        return path


def make_deployment(config: ConfigSpec, spec: SweepSpec, run_dir: Path) -> Deployment:
    kinds = {"launch": LaunchDeployment, "cluster": ClusterDeployment, "url": Deployment}
    return kinds[config.kind](config, spec, run_dir)


def server_command() -> list[str]:
    override = os.environ.get(SERVER_CMD_ENV)
    return shlex.split(override) if override else [sys.executable, "-m", "sglang.launch_server"]


def _plan(spec_file: Path, name: str) -> dict:
    out = subprocess.run(
        [*CLUSTER, "plan", str(spec_file), "--json"], capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        why = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise DeploymentError(f"config {name} could not start: cluster plan failed: {why}")
    return json.loads(out.stdout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _is_local(host: str) -> bool:
    if host in ("127.0.0.1", "localhost", socket.gethostname()):
        return True
    return any(a.address == host for addrs in psutil.net_if_addrs().values() for a in addrs)


def _flag_int(args: list[str], names: tuple[str, ...], default: int) -> int:
    for i, arg in enumerate(args):
        key, _, value = arg.partition("=")
        if key in names:
            return int(value or args[i + 1])
    return default


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    return lines[-1].strip()[:300] if lines else "no output"
