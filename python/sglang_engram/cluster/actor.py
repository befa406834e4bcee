"""The Ray actor that hosts one supervised process (an SGLang worker or the router).

Ray schedules the actor on its planned node with the worker's GPUs (and sets
CUDA_VISIBLE_DEVICES for it); the actor runs the real process under a
:class:`ProcessSupervisor` and, for a worker, keeps its router registration in step
(:class:`RouterRegistrar`). Actors are named in the cluster's Ray namespace and belong
to the ``up`` that created them.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from sglang_engram.cluster.engram_gauges import fetch_engram_gauges
from sglang_engram.cluster.keys import ClusterKeys
from sglang_engram.cluster.registration import RouterRegistrar
from sglang_engram.cluster.supervisor import ProcessCommand, ProcessSupervisor


class ServerActor:
    def __init__(
        self,
        command: ProcessCommand,
        *,
        role: str,
        port: int,
        bootstrap_port: int | None = None,
        keys: ClusterKeys | None = None,
    ) -> None:
        self.role = role
        self.host = ray.util.get_node_ip_address()
        self.node_id = ray.get_runtime_context().get_node_id()
        self.url = f"http://{self.host}:{port}"
        self.gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        self.supervisor = ProcessSupervisor(command)
        self.registrar = None
        if role != "router":
            admin, client = (keys.admin, keys.client) if keys else (None, None)
            self.registrar = RouterRegistrar(
                self.url, role, bootstrap_port, self._worker_state, admin_key=admin, api_key=client
            )

    def _worker_state(self) -> tuple[bool, int]:
        # NOTE: a worker stays registered while its process lives (once it has answered
        # /health); the router's own health checks handle a live but unhealthy one.
        return self.supervisor.state in ("running", "unhealthy"), self.supervisor.restarts

    def start(self) -> dict[str, Any]:
        self.supervisor.start()
        return {"url": self.url, "gpu_ids": self.gpu_ids}

    def attach_router(self, router_url: str) -> None:
        if self.registrar is not None:
            self.registrar.attach(router_url)

    def status(self) -> dict[str, Any]:
        status = self.supervisor.snapshot()
        status.update(
            role=self.role,
            host=self.host,
            node_id=self.node_id,
            url=self.url,
            gpu_ids=self.gpu_ids,
            supervisor_pid=os.getpid(),
        )
        if self.registrar is not None:
            status["router"] = self.registrar.snapshot()
            alive = status["state"] in ("running", "unhealthy")
            status["engram"] = fetch_engram_gauges(f"{self.url}/metrics") if alive else []
        return status

    def log_tail(self, lines: int = 20) -> list[str]:
        return self.supervisor.log_tail(lines)

    def stop(self) -> list[int]:
        """Stop registering, then stop the process tree; return the pids it had."""
        if self.registrar is not None:
            self.registrar.stop()
        return self.supervisor.stop()


# NOTE: max_concurrency > 1 so that status() answers while stop() waits for a process.
RemoteServerActor = ray.remote(max_concurrency=4)(ServerActor)
