"""Sessions in process memory: for tests and single-run tools."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager

from dynagent.models.base import Message
from dynagent.sessions.base import DEFAULT_HISTORY_BYTES, SessionLocks, first_kept


class MemorySessionStore:
    def __init__(self, max_history_bytes: int = DEFAULT_HISTORY_BYTES) -> None:
        self.max_history_bytes = max_history_bytes
        self._sessions: dict[str, list[Message]] = {}
        self._locks = SessionLocks()
        self._pins: dict[str, str] = {}

    async def load(self, session_id: str) -> list[Message]:
        return copy.deepcopy(self._sessions.get(session_id, []))

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        kept = self._sessions.setdefault(session_id, [])
        kept.extend(copy.deepcopy(list(messages)))
        sizes = (
            (i, len(json.dumps(m).encode()), m.get("role"))
            for i, m in reversed(list(enumerate(kept)))
        )
        cut = first_kept(sizes, self.max_history_bytes)
        del kept[: len(kept) if cut is None else cut]

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(session_id)

    async def pin(self, key: str, value: str) -> str:
        return self._pins.setdefault(key, value)

    async def aclose(self) -> None:
        return None
