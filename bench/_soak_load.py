"""The soak's agents and its load: what ``bench.soak`` keeps up while it samples the service.

Two agents in a folder the service watches: ``chat`` (one model call; a canary with another
prompt takes half of its callers) and ``tool`` (the model calls the built-in ``calculator``,
then answers). Callers go round session turns (four per conversation, then a new session),
our streamed answers and chat completions' streamed chunks on ``chat``; one more caller asks
``tool`` one run at a time (the scripted model plays call-then-answer in a cycle, which
concurrent runs would interleave). An editor saves ``tool``'s file with a new prompt every
few seconds: a hot reload to a new revision each time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.scenarios import REPLY_MODEL, SOAK_TOOL_MODEL

EDIT_EVERY = 5.0
"""Seconds between two edits of the ``tool`` agent's file."""
TURNS = 4
"""Turns of one conversation before its caller starts a new session."""


def _agent(name: str, base_url: str, model: str, system: str, **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "model": {
            "provider": "openai",
            "base_url": base_url,
            "api_key": "soak-key",
            "name": model,
            "retries": 0,
        },
        "prompt": {"system": system},
        "limits": {"max_steps": 4},
        **more,
    }


def _save(path: Path, document: dict[str, Any]) -> None:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")


def tool_agent(base_url: str, edit: int) -> dict[str, Any]:
    system = f"Work it out with the calculator. (edit {edit})"
    return _agent("tool", base_url, SOAK_TOOL_MODEL, system, tools=["calculator"])


def write_agents(home: Path, base_url: str) -> Path:
    """The agents folder: ``chat``, its canary and ``tool``."""
    agents = home / "agents"
    agents.mkdir()
    chat = _agent("chat", base_url, REPLY_MODEL, "Answer briefly.")
    _save(agents / "chat.yaml", chat)
    canary = {**chat, "prompt": {"system": "Answer briefly, kindly."}, "rollout": {"weight": 50}}
    _save(agents / "chat.canary.yaml", canary)
    _save(agents / "tool.yaml", tool_agent(base_url, 0))
    return agents


def write_service_config(home: Path, agents: Path) -> Path:
    """Agents from ``agents``, sessions in SQLite (on disk: a session kept is not a leak)."""
    config = {
        "factories": {"default": {"directory": str(agents)}},
        "sessions": {"store": "sqlite", "path": str(home / "sessions.db")},
    }
    path = home / "service.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


class SoakLoad:
    """The callers and the editor; the latencies of the answers since the last window."""

    def __init__(self, url: str, agents: Path, base_url: str) -> None:
        self.url = url
        self.agents = agents
        self.base_url = base_url
        self.edits = 0
        self.by_kind: Counter[str] = Counter()
        self._latencies: list[float] = []
        self._failures = 0
        self._stop = asyncio.Event()
        self.failed: list[str] = []
        """The first few failures, for the report."""

    def take_window(self) -> tuple[list[float], int]:
        """Latencies (ms) of the answers and the failures since the last call."""
        window, self._latencies = self._latencies, []
        failures, self._failures = self._failures, 0
        return window, failures

    @asynccontextmanager
    async def running(self, workers: int) -> AsyncIterator[SoakLoad]:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            tasks = [asyncio.create_task(self._caller(http, n)) for n in range(workers)]
            tasks += [
                asyncio.create_task(self._tool_caller(http)),
                asyncio.create_task(self._editor()),
            ]
            try:
                yield self
            finally:
                self._stop.set()
                await asyncio.gather(*tasks)

    async def _caller(self, http: aiohttp.ClientSession, n: int) -> None:
        kinds = itertools.cycle(("turn", "stream", "chat-stream"))
        for turn in itertools.count():
            if self._stop.is_set():
                return
            kind = next(kinds)
            session = f"caller-{n}-{turn // (3 * TURNS)}"
            await self._call(http, kind, *_request(kind, session))

    async def _tool_caller(self, http: aiohttp.ClientSession) -> None:
        while not self._stop.is_set():
            await self._call(http, "tool", "/v1/agents/tool/invoke", {"input": "What is 6*7?"})

    async def _editor(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), EDIT_EVERY)
            self.edits += 1
            await asyncio.to_thread(
                _save, self.agents / "tool.yaml", tool_agent(self.base_url, self.edits)
            )

    async def _call(
        self, http: aiohttp.ClientSession, kind: str, path: str, body: dict[str, Any]
    ) -> None:
        started = time.perf_counter()
        problem = None
        try:
            async with http.post(f"{self.url}{path}", json=body) as response:
                text = await response.text()
                if response.status != 200:
                    problem = f"{kind}: HTTP {response.status} {text[:200]}"
                elif body.get("stream") and not _finished(text):
                    problem = f"{kind}: the stream ended early: {text[-200:]}"
        except (aiohttp.ClientError, TimeoutError) as exc:
            problem = f"{kind}: {exc!r}"
        self.by_kind[kind] += 1
        if problem is None:
            self._latencies.append((time.perf_counter() - started) * 1000)
            return
        self._failures += 1
        if len(self.failed) < 10:
            self.failed.append(problem)


def _request(kind: str, session: str) -> tuple[str, dict[str, Any]]:
    if kind == "turn":
        return "/v1/agents/chat/invoke", {"input": "Hello again.", "session_id": session}
    if kind == "stream":
        return "/v1/agents/chat/invoke", {"input": "Hello.", "stream": True}
    messages = [{"role": "user", "content": "Hello."}]
    return "/v1/chat/completions", {"model": "chat", "messages": messages, "stream": True}


def _finished(text: str) -> bool:
    """A whole stream: our events end with ``run_finished``, chat completions' with DONE."""
    tail = text.rstrip()
    return tail.endswith("data: [DONE]") or "event: run_finished" in text[-2000:]
