"""A real ``dynagent serve`` process, for tests of what only a process shows: signals,
draining, exit codes, restarts.

    async with serve_process(tmp_path, {"listen": {"drain_seconds": 5}}) as served:
        served.terminate()
        await served.wait_log("stopping: no new connections")

Readiness and shutdown are awaited on the process's own log lines, never on sleeps;
the process is killed if the block leaves it running.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DYNAGENT = Path(sys.executable).parent / "dynagent"
STARTUP = 30.0
"""Seconds a starting process may take to listen (imports on a loaded machine)."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_ready(url: str, server: subprocess.Popen[str], within: float = STARTUP) -> None:
    """Poll ``url``/readyz of a starting process (blocking) until it answers 200."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert server.poll() is None, "dynagent serve exited before it was ready"
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet, or too busy starting to answer within the second
        time.sleep(0.05)  # polling a starting process, not waiting for a reload
    raise AssertionError(f"{url}/readyz did not answer 200 within {within} s")


@contextmanager
def dynagent_serving(args: list[str], env: dict[str, str]) -> Iterator[str]:
    """``dynagent serve ARGS --port P`` in a real process until the block ends; its base URL.
    Stopped with SIGTERM, which must exit 0; killed if anything goes wrong."""
    port = free_port()
    server = subprocess.Popen(
        [str(DYNAGENT), "serve", *args, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    with stopped_cleanly(server, url):
        yield url


@contextmanager
def stopped_cleanly(server: subprocess.Popen[str], url: str) -> Iterator[None]:
    """Wait until ``server`` (answering at ``url``) is ready; when the block ends, stop it
    with SIGTERM, which must exit 0 (its stderr is the message). Killed if anything goes
    wrong."""
    try:
        wait_ready(url, server)
        yield
        server.send_signal(signal.SIGTERM)
        _, log = server.communicate(timeout=30)
        assert server.returncode == 0, log
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()


@dataclass
class ServedProcess:
    process: asyncio.subprocess.Process
    port: int
    log: list[str] = field(default_factory=list)
    """Every line the process wrote to stderr so far."""
    started_in: float = 0.0
    """Seconds from its spawn to its listening: the unit that a time bound on this process
    is counted in, measured in the same run (a slower or loaded machine moves both)."""
    _grew: asyncio.Condition = field(default_factory=asyncio.Condition)
    _ended: bool = False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def terminate(self) -> None:
        self.process.send_signal(signal.SIGTERM)

    async def wait_log(self, text: str, within: float = 10.0) -> str:
        """The first log line containing ``text``, once written; fails if the process
        ends or ``within`` seconds pass first."""

        def found() -> str | None:
            return next((line for line in self.log if text in line), None)

        async with asyncio.timeout(within), self._grew:
            await self._grew.wait_for(lambda: found() is not None or self._ended)
        line = found()
        assert line is not None, f"{text!r} never logged:\n" + "\n".join(self.log)
        return line

    async def exit_code(self, within: float) -> int:
        async with asyncio.timeout(within):
            return await self.process.wait()

    async def _pump(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            async with self._grew:
                self.log.append(line.decode(errors="replace").rstrip())
                self._grew.notify_all()
        async with self._grew:
            self._ended = True
            self._grew.notify_all()


def write_config(folder: Path, sections: dict[str, Any]) -> Path:
    path = folder / "service.yaml"
    path.write_text(yaml.safe_dump(sections, sort_keys=False), encoding="utf-8")
    return path


@asynccontextmanager
async def serve_process(config: Path, port: int) -> AsyncIterator[ServedProcess]:
    """``dynagent serve --config config --port port``, listening, with no outside
    ``OPENAI_*``/``DYNAGENT_*`` settings; killed at the end if still running."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYNAGENT_"))}
    spawned = time.monotonic()
    process = await asyncio.create_subprocess_exec(
        str(DYNAGENT),
        "serve",
        "--config",
        str(config),
        "--port",
        str(port),
        env=environ,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    served = ServedProcess(process, port)
    pump = asyncio.create_task(served._pump())
    try:
        await served.wait_log(f"listening on http://127.0.0.1:{port}", within=STARTUP)
        served.started_in = time.monotonic() - spawned
        yield served
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        with suppress(asyncio.CancelledError):
            await pump


__all__ = ["ServedProcess", "free_port", "serve_process", "write_config"]
