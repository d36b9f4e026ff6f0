"""Canary documents, and a load of concurrent requests kept up while a test changes versions.

async with Load(session, f"{url}/v1/agents/bot/invoke") as load:
    await load.until(20)
    ...  # promote, roll back
    await load.until(len(load.answers) + 20)
assert load.failures() == []
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dynagent import load_spec

Document = dict[str, Any]


def canary_document(document: Document, weight: float, **rollout: Any) -> Document:
    """``document`` as a canary: the same spec plus ``rollout: {weight, **rollout}``."""
    return {**document, "rollout": {"weight": weight, **rollout}}


def canary_filename(name: str) -> str:
    return f"{name}.canary.yaml"


def canary_revision(document: Document) -> str:
    """The revision the service will serve for the canary ``document``."""
    return load_spec({k: v for k, v in document.items() if k != "rollout"}).revision


@dataclass(frozen=True, slots=True)
class Answer:
    """What one request of the load got back."""

    status: int
    variant: str | None
    revision: str | None
    """From the ``X-Agent-Variant`` / ``X-Agent-Revision`` headers."""
    body: Any


@dataclass
class Load:
    """``workers`` callers posting ``body`` to ``url`` back to back, until the block ends
    or ``limit`` requests were sent (a bound, so a broken test cannot loop forever)."""

    session: aiohttp.ClientSession
    url: str
    workers: int = 4
    limit: int = 20_000
    body: Document = field(default_factory=lambda: {"input": "hi"})
    headers: dict[str, str] = field(default_factory=dict)
    pause: float = 0.0
    """Seconds each caller rests between requests: pacing for long tests, not a wait."""
    answers: list[Answer] = field(default_factory=list)
    _sent: int = 0
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _stopped: int = 0

    async def __aenter__(self) -> Load:
        self._tasks = [asyncio.create_task(self._caller()) for _ in range(self.workers)]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def until(self, count: int, within: float = 30) -> int:
        """Wait until ``count`` answers have come back; returns how many there are."""
        async with asyncio.timeout(within), self._arrived:
            await self._arrived.wait_for(lambda: len(self.answers) >= count or self._done())
        assert len(self.answers) >= count, f"the load stopped after {len(self.answers)} answers"
        return len(self.answers)

    def failures(self) -> list[Answer]:
        return [a for a in self.answers if a.status != 200]

    def revisions(self) -> set[str | None]:
        return {a.revision for a in self.answers}

    def _done(self) -> bool:
        """Every caller has stopped: the limit was reached, or they failed."""
        return self._stopped == self.workers

    async def _caller(self) -> None:
        try:
            while not self._stop.is_set() and self._sent < self.limit:
                self._sent += 1
                answer = await self._call()
                async with self._arrived:
                    self.answers.append(answer)
                    self._arrived.notify_all()
                if self.pause:
                    await asyncio.sleep(self.pause)
        finally:
            self._stopped += 1
            async with self._arrived:
                self._arrived.notify_all()

    async def _call(self) -> Answer:
        # A key of its own per request, so that the load reaches both variants.
        headers = {"X-Canary-Key": f"load-{self._sent}", **self.headers}
        async with self.session.post(self.url, json=self.body, headers=headers) as response:
            return Answer(
                response.status,
                response.headers.get("X-Agent-Variant"),
                response.headers.get("X-Agent-Revision"),
                await response.json(content_type=None),
            )
