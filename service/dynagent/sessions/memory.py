"""Sessions in process memory: for tests and single-run tools."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager

from dynagent.models.base import Message
from dynagent.sessions.base import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_SESSION_TTL,
    PURGE_EVERY,
    SessionLocks,
    first_kept,
)


class MemorySessionStore:
    def __init__(
        self,
        max_history_bytes: int = DEFAULT_HISTORY_BYTES,
        *,
        ttl: float = DEFAULT_SESSION_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_history_bytes = max_history_bytes
        self.ttl = ttl
        """Seconds a session is kept after its last use."""
        self._clock = clock
        self._sessions: dict[str, list[Message]] = {}
        self._used: dict[str, float] = {}
        self._swept = clock()
        self._locks = SessionLocks()
        self._pins: dict[str, str] = {}

    def _touch(self, session_id: str) -> None:
        now = self._clock()
        if now - self._swept >= min(PURGE_EVERY, self.ttl):
            self._swept = now
            for stale in [s for s, used in self._used.items() if now - used > self.ttl]:
                del self._used[stale]
                self._sessions.pop(stale, None)
        if session_id in self._sessions:
            self._used[session_id] = now

    async def load(self, session_id: str) -> list[Message]:
        self._touch(session_id)
        return copy.deepcopy(self._sessions.get(session_id, []))

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        self._touch(session_id)
        kept = self._sessions.setdefault(session_id, [])
        self._used[session_id] = self._clock()
        kept.extend(copy.deepcopy(list(messages)))
        sizes = (
            (i, len(json.dumps(m).encode()), m.get("role"))
            for i, m in reversed(list(enumerate(kept)))
        )
        cut = first_kept(sizes, self.max_history_bytes)
        del kept[: len(kept) if cut is None else cut]

    async def delete(self, session_id: str) -> bool:
        async with self._locks.hold(session_id):
            self._used.pop(session_id, None)
            return bool(self._sessions.pop(session_id, None))

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(session_id)

    async def pin(self, key: str, value: str) -> str:
        return self._pins.setdefault(key, value)

    async def aclose(self) -> None:
        return None
