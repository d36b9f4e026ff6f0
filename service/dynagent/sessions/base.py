"""Where conversations live between runs."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from ..models.base import Message


class SessionStore(Protocol):
    """Messages of a conversation (system prompt excluded), oldest first."""

    async def load(self, session_id: str) -> list[Message]: ...

    async def append(self, session_id: str, messages: Sequence[Message]) -> None: ...

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        """Held for a whole run, so two runs on one session never interleave."""
        ...

    async def pin(self, key: str, value: str) -> str:
        """Remember ``value`` under ``key`` unless a value is already there; the one that is
        (``rollout.pin_sessions``: the variant a session started on, shared by replicas)."""
        ...

    async def aclose(self) -> None: ...


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
