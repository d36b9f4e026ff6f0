"""Three Nacos nodes in cluster mode for tests and benchmarks, driven by
``scripts/nacos.sh cluster`` (embedded storage: Derby replicated by JRaft).

``NacosCluster`` starts and stops the nodes on ports of its own and homes under one folder,
kills a node the way a crash does (``SIGKILL``), and names the raft leader of the config
group, the node whose loss stops every write until the others elect a new one.

    with claimed_cluster_ports() as ports:
        cluster = NacosCluster(ports, home)
        cluster.start(clean=True)
        cluster.kill(cluster.leader())
        cluster.start()            # the killed node again; waits until all answer
        cluster.stop()
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import nacos as single
from .nacos import NacosScriptError, claimed_ports, port_free

CLUSTER_START = 21848
"""Away from the single test server's ports (18848 and up), the script's own cluster
(8858, 8868, 8878) and the bench's; and below the kernel's ephemeral range (32768 and up):
a fixed port there can be taken by any process's outgoing connection before a node binds
it, as a CI run saw ("Address already in use" for a node's gRPC port)."""
NODES = 3
CONFIG_GROUP = "nacos_config"
"""The raft group that holds configs: its leader takes every config write."""


@contextmanager
def claimed_cluster_ports(start: int = CLUSTER_START) -> Iterator[tuple[int, ...]]:
    """Three HTTP ports (10 apart) whose every port is free and that no other process on
    this machine has claimed for the block (a ``flock`` in the temp dir)."""
    nodes = range(NODES)
    bases = range(start, start + 1000, 100)
    with claimed_ports("nacos-cluster", bases, lambda b: tuple(b + 10 * i for i in nodes)) as ports:
        yield ports


@dataclass
class NacosCluster:
    """Nodes 1..3 on HTTP ``ports`` (gRPC +1000, cluster gRPC +1001, raft -1000), homes
    ``home/node1..3``."""

    ports: tuple[int, ...]
    home: Path

    @property
    def addr(self) -> str:
        """Every node, as ``nacos.server_addr`` takes them."""
        return ",".join(f"{single.HOST}:{port}" for port in self.ports)

    def base_url(self, node: int) -> str:
        return f"http://{single.HOST}:{self.ports[node - 1]}/nacos"

    def start(self, *nodes: int, clean: bool = False) -> float:
        """Start ``nodes`` (all when none are named) unless running, and wait until every one
        of them answers and a config round trip passes; seconds taken."""
        started = time.monotonic()
        args = ["--clean"] if clean else []
        self._script("start", *args, *map(str, nodes), timeout=single.START_TIMEOUT + 60)
        return time.monotonic() - started

    def stop(self) -> None:
        self._script("stop", timeout=120)

    def kill(self, *nodes: int) -> None:
        """``SIGKILL`` the nodes, as a crash or a pulled plug would end them."""
        self._script("kill", *map(str, nodes), timeout=60)

    def running(self, node: int) -> bool:
        return not port_free(self.ports[node - 1])

    def leader(self, *, within: float = 60) -> int:
        """The node leading the config group, as the running nodes agree on it (a node that
        was just cut off may still name the old leader for a moment)."""
        deadline = time.monotonic() + within
        while True:
            named = {self._leader_seen_by(n) for n in range(1, NODES + 1) if self.running(n)}
            leader = named.pop() if len(named) == 1 else None
            if leader is not None and self.running(leader):
                return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"no agreed leader of {CONFIG_GROUP}: {named}")
            time.sleep(0.2)  # polling a server's state, not waiting for ours

    async def aleader(self) -> int:
        return await asyncio.to_thread(self.leader)

    async def astart(self, *nodes: int) -> float:
        return await asyncio.to_thread(self.start, *nodes)

    async def akill(self, *nodes: int) -> None:
        await asyncio.to_thread(self.kill, *nodes)

    def _leader_seen_by(self, node: int) -> int | None:
        url = f"{self.base_url(node)}/v3/admin/core/cluster/node/self"
        try:
            with urllib.request.urlopen(url, timeout=3) as response:
                body = json.load(response)
        except (OSError, ValueError):
            return None
        groups = body["data"]["extendInfo"].get("raftMetaData", {}).get("metaDataMap", {})
        leader = str(groups.get(CONFIG_GROUP, {}).get("leader") or "")
        raft_ports = [port - 1000 for port in self.ports]
        port = leader.rpartition(":")[2]
        return (
            raft_ports.index(int(port)) + 1 if port.isdigit() and int(port) in raft_ports else None
        )

    def environ(self) -> dict[str, str]:
        return {
            "NACOS_CLUSTER_PORTS": " ".join(map(str, self.ports)),
            "NACOS_CLUSTER_HOME": str(self.home),
            # A cold start may need its nodes started again a few times (see
            # scripts/nacos/NOTES.md, "Start race"); the script gives up before we do.
            "NACOS_START_TIMEOUT": str(int(single.START_TIMEOUT)),
        }

    def _script(self, *args: str, timeout: float) -> None:
        done = subprocess.run(
            [str(single.SCRIPT), "cluster", *args],
            env={**os.environ, **self.environ()},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise NacosScriptError(
                f"scripts/nacos.sh cluster {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )


__all__ = ["NODES", "NacosCluster", "claimed_cluster_ports"]
