"""A real ``redis-server`` for tests and benchmarks, driven by ``scripts/redis.sh``.

    server = RedisServer(free_port(), tmp_path / "redis")
    server.start()
    ...  # sessions.url = server.url
    server.restart()  # the append-only file keeps every committed write
    server.stop()

The ``redis_server`` fixture starts one on a free loopback port for a test and stops it
afterwards.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from .process import free_port

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts" / "redis.sh"
HOST = "127.0.0.1"


@dataclass
class RedisServer:
    port: int
    home: Path

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def start(self, *, clean: bool = False) -> None:
        self._script("start", *(["--clean"] if clean else []))

    def stop(self) -> None:
        self._script("stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return self._run("status").returncode == 0

    def _script(self, *args: str) -> None:
        done = self._run(*args)
        if done.returncode != 0:
            raise RuntimeError(f"scripts/redis.sh {' '.join(args)} failed:\n{done.stderr}")

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "REDIS_PORT": str(self.port), "REDIS_HOME": str(self.home)}
        return subprocess.run(
            [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60, check=False
        )


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server on a free loopback port, stopped after the test."""
    server = RedisServer(free_port(), tmp_path / "redis")
    server.start(clean=True)
    try:
        yield server
    finally:
        server.stop()
