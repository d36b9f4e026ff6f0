"""The service under test, ``dynagent serve``, in a child process with its own config
and agents folder; its agents call the bench's scripted model server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._process import ROOT
from bench.scenarios import REPLY_MODEL, SYSTEM

AGENT = "reply"


def agent_document(base_url: str, *, system: str = SYSTEM, name: str = AGENT) -> dict[str, Any]:
    """An agent that makes one model call per request (the scripted ``reply`` model)."""
    return {
        "name": name,
        "model": {
            "provider": "openai",
            "base_url": base_url,
            "api_key": "bench-key",
            "name": REPLY_MODEL,
            "retries": 0,
        },
        "prompt": {"system": system},
        "limits": {"max_steps": 2},
    }


def write_config(folder: Path, agents: Path, *, extra: Mapping[str, Any] | None = None) -> Path:
    """A service config: agents from ``agents``, in-memory sessions, logs at INFO as shipped."""
    config = {
        "factories": {"default": {"directory": str(agents)}},
        "sessions": {"store": "memory"},
        **(extra or {}),
    }
    path = folder / "service.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


class Service:
    """``dynagent serve --config FILE --port PORT`` in a child process, ready once
    ``/readyz`` answers 200."""

    def __init__(
        self,
        config: Path,
        port: int,
        log: Path,
        env: Mapping[str, str],
        *,
        module: tuple[str, ...] = ("dynagent",),
    ) -> None:
        """``module``: what ``python -m`` runs, with its arguments before ``serve``."""
        self.argv = [
            sys.executable,
            "-m",
            *module,
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
        ]
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.env = {**os.environ, **env}
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, within: float = 60.0) -> None:
        with open(self.log, "ab") as log:  # noqa: ASYNC230
            self.process = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        async with aiohttp.ClientSession() as session, asyncio.timeout(within):
            while True:
                if self.process.returncode is not None:
                    raise RuntimeError(f"the service exited {self.process.returncode}; {self.log}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(self.url + "/readyz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(30):
                await process.wait()
        except TimeoutError:
            process.kill()
            await process.wait()

    async def __aenter__(self) -> Service:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
