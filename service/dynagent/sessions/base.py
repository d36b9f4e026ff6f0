"""Where conversations live between runs."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, runtime_checkable

from dynagent.models.base import Message

DEFAULT_HISTORY_BYTES = 4 * 1024 * 1024
"""``sessions.max_history_bytes``: the most of a conversation a run is given and a store keeps."""
DEFAULT_SESSION_TTL = 30 * 24 * 3600.0
"""``sessions.ttl``: a session unused this long (seconds) is deleted."""
PURGE_EVERY = 60.0
"""Seconds between two sweeps of expired sessions in the stores that sweep (SQLite, memory)."""


def first_kept(newest_first: Iterable[tuple[int, int, str | None]], budget: int) -> int | None:
    """The position of the oldest message a session keeps, by the history budget rule.

    ``newest_first`` yields (position, bytes, role) of a session's messages, newest first.
    A session keeps its newest whole turns (a turn starts at a ``user`` message) whose
    messages add up to at most ``budget`` bytes of JSON; older turns are dropped, never
    part of one, so the history always starts at a user message and never holds a tool
    result without the call it answers. None: nothing fits (the newest turn alone is
    over the budget). Reading stops at the first message past the budget, so a long
    history is never read whole.
    """
    total, cut = 0, None
    for position, size, role in newest_first:
        total += size
        if total > budget:
            break
        if role == "user":
            cut = position
    return cut


class SessionStore(Protocol):
    """Messages of a conversation (system prompt excluded), oldest first."""

    async def load(self, session_id: str) -> list[Message]: ...

    async def append(self, session_id: str, messages: Sequence[Message]) -> None: ...

    async def delete(self, session_id: str) -> bool:
        """Forget the conversation (once a run holding its lock is done, so that run's turn
        goes too); whether there was one. It takes the session's lock: never call it while
        holding that."""
        ...

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Held for a whole run, so two runs on one session never interleave."""
        ...

    async def pin(self, key: str, value: str) -> str:
        """Remember ``value`` under ``key`` unless a value is already there; the one that is
        (``rollout.pin_sessions``: the variant a session started on, shared by replicas)."""
        ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ReportsHealth(Protocol):
    """A store on a server of its own (Redis), which can be out while the service runs."""

    def watch_health(self, listener: Callable[[str | None], None]) -> None:
        """Tell ``listener`` why the store is out, and None once it answers again."""
        ...


class SessionLocks:
    """One asyncio lock per session id, dropped when nobody holds or waits on it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock = self._locks.get(session_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[session_id] = lock
        async with lock:
            yield
