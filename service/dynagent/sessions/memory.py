"""Sessions in process memory: for tests and single-run tools."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from ..models.base import Message
from .base import SessionLocks


class MemorySessionStore:
    def __init__(self) -> None:
        self._sessions: dict[str, list[Message]] = {}
        self._locks = SessionLocks()
        self._pins: dict[str, str] = {}

    async def load(self, session_id: str) -> list[Message]:
        return copy.deepcopy(self._sessions.get(session_id, []))

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        self._sessions.setdefault(session_id, []).extend(copy.deepcopy(list(messages)))

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(session_id)

    async def pin(self, key: str, value: str) -> str:
        return self._pins.setdefault(key, value)

    async def aclose(self) -> None:
        return None
