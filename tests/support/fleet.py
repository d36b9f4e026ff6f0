"""A real fleet for tests and benchmarks, driven by ``scripts/fleet.sh``: one Nacos, one
Redis, ``replicas`` ``dynagent serve`` processes and nginx in front, all on free loopback
ports, in a home of its own.

    with Fleet.on_free_ports(home, replicas=3) as fleet:
        fleet.up()
        ...  # publish agents into fleet.nacos_url, call fleet.url
    # down at the end of the block, whatever happened
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .nacos import claimed_port, port_free
from .process import DYNAGENT, free_port

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "fleet.sh"
HOST = "127.0.0.1"


POLL = 0.05
"""Seconds between looks at another process's state (no event crosses processes)."""


async def until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> float:
    """Poll ``check`` until it holds; the seconds it took."""
    started = time.monotonic()
    while not await check():
        if time.monotonic() - started > within:
            raise AssertionError(f"{what} did not happen within {within} s")
        await asyncio.sleep(POLL)
    return time.monotonic() - started


def free_run(count: int, start: int = 21000) -> int:
    """The first of ``count`` consecutive free ports (the replicas' ports)."""
    for base in range(start, start + 4000, count + 1):
        if all(port_free(p) for p in range(base, base + count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports from {start}")


@dataclass
class Fleet:
    home: Path
    port: int
    replica_port: int
    replicas: int
    nacos_port: int
    redis_port: int
    group: str
    poll_seconds: float = 0.5
    """How often the replicas list the group (tests: quick; fleet.sh's own default is 2)."""
    service_extra: str = ""
    """More service config sections every replica gets (``FLEET_SERVICE_EXTRA``)."""
    extra_environ: dict[str, str] = field(default_factory=dict)
    """Variables the replicas get besides the fleet's (a webhook's secret, ...)."""

    @classmethod
    @contextmanager
    def on_free_ports(
        cls,
        home: Path,
        replicas: int = 3,
        *,
        poll_seconds: float = 0.5,
        service_extra: str = "",
        extra_environ: dict[str, str] | None = None,
    ) -> Iterator[Fleet]:
        """A fleet description on free ports (Nacos's claimed for the block); ``down`` at
        the end of the block."""
        with claimed_port() as nacos_port:
            fleet = cls(
                home,
                free_port(),
                free_run(replicas),
                replicas,
                nacos_port,
                free_port(),
                f"FLEET-{uuid.uuid4().hex[:8]}",
                poll_seconds,
                service_extra,
                dict(extra_environ or {}),
            )
            try:
                yield fleet
            finally:
                fleet.down()

    @property
    def url(self) -> str:
        """nginx: where callers go."""
        return f"http://{HOST}:{self.port}"

    def replica_url(self, n: int) -> str:
        """Replica ``n`` (1-based) directly, past nginx."""
        return f"http://{HOST}:{self.replica_port + n - 1}"

    @property
    def nacos_url(self) -> str:
        return f"http://{HOST}:{self.nacos_port}/nacos"

    @property
    def redis_home(self) -> Path:
        return self.home / "redis"

    def up(self) -> None:
        if self.service_extra:
            self.home.mkdir(parents=True, exist_ok=True)
            self._extra_path.write_text(self.service_extra)
        self._script("up", timeout=300)

    @property
    def _extra_path(self) -> Path:
        return self.home / "service-extra.yaml"

    def down(self) -> None:
        self._script("down", timeout=120, check=False)

    def restart(self) -> None:
        """Every replica, one after another (``scripts/fleet.sh restart``)."""
        self._script("restart", timeout=60 + 60 * self.replicas)

    def restart_replica(self, n: int) -> None:
        self._script("restart-replica", str(n), timeout=90)

    def stop_replica(self, n: int) -> None:
        self._script("stop-replica", str(n), timeout=60)

    def start_replica(self, n: int) -> None:
        self._script("start-replica", str(n), timeout=90)

    def replica_pid(self, n: int) -> int:
        return int((self.home / f"replica-{n}" / "pid").read_text().strip())

    def nginx_pids(self) -> list[int]:
        """nginx's master and its worker (whose CPU a benchmark adds up)."""
        master = int((self.home / "nginx" / "nginx.pid").read_text().strip())
        children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
        return [master, *(int(c) for c in children)]

    def kill_replica(self, n: int) -> int:
        """SIGKILL replica ``n`` and wait until it has exited (a zombie, or gone); its pid.

        The signal is delivered at once but a process of many threads takes a moment to
        exit, and until it has, ``fleet.sh`` rightly takes it for a replica still running:
        a start-replica then started nothing (seen once on a loaded machine)."""
        pid = self.replica_pid(n)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not exited(pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        return pid

    def restart_redis(self) -> None:
        env = {**os.environ, "REDIS_PORT": str(self.redis_port), "REDIS_HOME": str(self.redis_home)}
        for action in ("stop", "start"):
            subprocess.run(
                [str(ROOT / "scripts" / "redis.sh"), action],
                env=env,
                capture_output=True,
                timeout=60,
                check=True,
            )

    def environ(self) -> dict[str, str]:
        """What ``scripts/fleet.sh`` needs to find this fleet (``up`` is then a no-op)."""
        environ = {
            k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYNAGENT_"))
        }
        extra = {"FLEET_SERVICE_EXTRA": str(self._extra_path)} if self.service_extra else {}
        return {
            **environ,
            **self.extra_environ,
            **extra,
            "FLEET_HOME": str(self.home),
            "FLEET_PORT": str(self.port),
            "FLEET_REPLICAS": str(self.replicas),
            "FLEET_REPLICA_PORT": str(self.replica_port),
            "NACOS_PORT": str(self.nacos_port),
            "REDIS_PORT": str(self.redis_port),
            "FLEET_GROUP": self.group,
            "FLEET_SAMPLES": "0",
            "FLEET_POLL_SECONDS": f"{self.poll_seconds:g}",
            "DYNAGENT": str(DYNAGENT),  # this environment's, wherever the checkout is
        }

    def _script(self, *args: str, timeout: float, check: bool = True) -> None:
        done = subprocess.run(
            [str(SCRIPT), *args],
            env=self.environ(),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"scripts/fleet.sh {' '.join(args)} failed:\n{done.stderr}")


def exited(pid: int) -> bool:
    """Whether ``pid`` has exited: gone, or a zombie left for its parent to reap."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"
