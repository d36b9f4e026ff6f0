"""A real Prometheus (``scripts/prometheus.sh``) scraping services on loopback, for as
long as a test needs it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "prometheus.sh"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _script(home: Path, targets: Sequence[str], interval: str) -> Callable[..., str]:
    env = {
        **os.environ,
        "PROM_PORT": str(free_port()),
        "PROM_HOME": str(home),
        "PROM_TARGETS": ",".join(targets),
        "PROM_SCRAPE_INTERVAL": interval,
    }

    def script(*args: str) -> str:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    return script


def installed() -> None:
    """Debian's prometheus and its promtool, installed when missing (as ``start`` does)."""
    done = subprocess.run(
        ["bash", str(SCRIPT), "install"], capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr


@asynccontextmanager
async def prometheus(
    home: Path, targets: Sequence[str], interval: str = "1s"
) -> AsyncIterator[str]:
    """Start Prometheus in ``home`` scraping ``targets``; yield its URL; stop it."""
    script = _script(home, targets, interval)
    await asyncio.to_thread(script, "start", "--clean")
    try:
        yield await asyncio.to_thread(script, "url")
    finally:
        await asyncio.to_thread(script, "stop")


@contextmanager
def prometheus_running(home: Path, targets: Sequence[str], interval: str = "1s") -> Iterator[str]:
    """``prometheus``, for a synchronous (module or session) fixture."""
    script = _script(home, targets, interval)
    script("start", "--clean")
    try:
        yield script("url")
    finally:
        script("stop")
