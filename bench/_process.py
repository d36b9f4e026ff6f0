"""Child processes of a bench run: each prints one JSON line when it is ready and,
when stopped with SIGTERM, one JSON line with what it has to report.

Servers run in their own processes so that the load generator, the service under
test and the scripted model never share an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of a process (this one by default), from ``/proc``."""
    statm = Path(f"/proc/{pid or os.getpid()}/statm").read_text().split()
    return int(statm[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far, from ``/proc/PID/stat``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Child:
    """``python -m MODULE ARGS``: a JSON line on stdout says it is ready."""

    def __init__(
        self,
        module: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        stderr: Path | None = None,
    ) -> None:
        self.argv = [sys.executable, "-m", module, *args]
        self.env = {**os.environ, **(env or {})}
        self.stderr = stderr
        self.process: asyncio.subprocess.Process | None = None
        self.ready: dict[str, Any] = {}

    async def start(self, within: float = 60.0) -> dict[str, Any]:
        stderr_file = open(self.stderr, "ab") if self.stderr else None  # noqa: SIM115, ASYNC230
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr_file or asyncio.subprocess.DEVNULL,
            )
        finally:
            if stderr_file is not None:
                stderr_file.close()
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(within):
                line = await self.process.stdout.readline()
        except TimeoutError:
            await self.stop()
            raise RuntimeError(f"{' '.join(self.argv)} did not get ready in {within} s") from None
        if not line:
            code = await self.process.wait()
            raise RuntimeError(f"{' '.join(self.argv)} exited {code} before it was ready")
        self.ready = json.loads(line)
        return self.ready

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def stop(self, within: float = 30.0) -> dict[str, Any]:
        """SIGTERM, then the child's last JSON line (``{}`` when it printed none)."""
        process, self.process = self.process, None
        if process is None:
            return {}
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(within):
                out, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            out, _ = await process.communicate()
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        result: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        return result

    async def __aenter__(self) -> Child:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
