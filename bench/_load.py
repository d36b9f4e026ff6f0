"""A closed-loop HTTP load generator: ``concurrency`` workers, each sending its next
request when the previous answers, for a fixed time. Loopback only."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

OnResponse = Callable[[aiohttp.ClientResponse], None]


@dataclass
class LoadResult:
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    @property
    def requests(self) -> int:
        return len(self.latencies_ms) + sum(self.failures.values())

    @property
    def ok(self) -> int:
        return len(self.latencies_ms)

    def merge(self, other: LoadResult) -> None:
        self.seconds += other.seconds
        self.latencies_ms += other.latencies_ms
        self.failures.update(other.failures)


async def load(
    url: str,
    body: dict[str, Any],
    *,
    concurrency: int,
    seconds: float,
    on_response: OnResponse | None = None,
    until: asyncio.Event | None = None,
) -> LoadResult:
    """Post ``body`` to ``url`` from ``concurrency`` workers for ``seconds``, or until
    ``until`` is set, whichever comes first."""
    result = LoadResult()
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        deadline = started + seconds

        async def worker() -> None:
            while time.perf_counter() < deadline and not (until and until.is_set()):
                sent = time.perf_counter()
                try:
                    async with session.post(url, json=body) as response:
                        await response.read()
                        if on_response is not None:
                            on_response(response)
                        if response.status != 200:
                            result.failures[f"HTTP {response.status}"] += 1
                            continue
                except (aiohttp.ClientError, TimeoutError) as exc:
                    result.failures[type(exc).__name__] += 1
                    continue
                result.latencies_ms.append((time.perf_counter() - sent) * 1000)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.seconds = time.perf_counter() - started
    return result
