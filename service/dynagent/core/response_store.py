"""Responses kept for ``GET /v1/responses/{id}`` and ``previous_response_id``: the
newest of this process, in memory, at most ``max_responses`` of them and at most
``max_bytes`` together, each shown only to the identity that created it and to admins
(``Caller.may_read_run``, as its run's trace), who may also delete it. Its id is random,
not derived from the run's trace id: knowing a response id tells nothing about the
trace. The conversation a response carries on is cut to the history budget (whole
turns, as a session is), so a ``previous_response_id`` chain never grows past it. When
the fleet shares a Redis (``SharedRuns``), responses are kept there (the bounds then hold
for the fleet) and read from there: a conversation continues on any replica, through
restarts."""

from __future__ import annotations

import contextlib
import json
import secrets
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

from dynagent.core.auth import Caller
from dynagent.core.shared_runs import SharedRuns
from dynagent.exceptions import ResponseNotFound, SessionStoreUnavailable
from dynagent.models.base import Message
from dynagent.sessions.base import DEFAULT_HISTORY_BYTES, first_kept

MAX_RESPONSES = 1000
MAX_BYTES = 64 * 1024 * 1024
"""Stored responses together, as JSON: older ones are dropped past it."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    body: dict[str, Any]
    """The response object as it was answered."""
    messages: tuple[Message, ...]
    """The conversation up to and including this response, as chat messages."""
    owner: str
    """The identity (``Caller.principal``) that created it."""
    agent: str
    """The agent that answered: a key that may no longer call it no longer reads it."""


def new_response_id() -> str:
    """A response's id: 128 random bits from ``secrets``, unrelated to its run's trace id."""
    return f"resp_{secrets.token_hex(16)}"


class ResponseStore:
    def __init__(
        self,
        max_responses: int = MAX_RESPONSES,
        *,
        max_bytes: int = MAX_BYTES,
        history_bytes: int = DEFAULT_HISTORY_BYTES,
        shared: SharedRuns | None = None,
    ) -> None:
        self.shared = shared
        """The fleet's Redis, when it shares one: responses are kept and read there."""
        self._kept: OrderedDict[str, tuple[StoredResponse, int]] = OrderedDict()
        self._max = max_responses
        self.max_bytes = max_bytes
        self.history_bytes = history_bytes
        """The conversation a stored response carries is cut to this, like a session's."""
        self.bytes = 0
        """What the kept responses take, as JSON."""
        self._in_fleet: set[str] = set()
        """Kept responses the fleet's Redis took: once it no longer has one (deleted on
        any replica, or past the fleet's bounds), this replica's copy is not shown."""

    async def keep(self, stored: StoredResponse) -> None:
        """``put``, and into the fleet's Redis when it shares one (before the answer goes
        out, so the next turn finds it on any replica)."""
        stored = self.put(stored)
        if self.shared is not None:
            record = {"body": stored.body, "messages": list(stored.messages)}
            record |= {"owner": stored.owner, "agent": stored.agent}
            if await self.shared.keep_quietly("response", stored.body["id"], record, None):
                self._in_fleet.add(stored.body["id"])

    async def find(self, response_id: str, reader: Caller) -> StoredResponse:
        """``get``, through the fleet's Redis when it shares one."""
        if self.shared is not None:
            record, answered = None, False
            with contextlib.suppress(SessionStoreUnavailable):  # out: what this replica has
                record = await self.shared.get("response", response_id)
                answered = True
            if record is None and answered and response_id in self._in_fleet:
                raise self._not_found(response_id)  # the fleet deleted or dropped it
            if record is not None:
                stored = StoredResponse(
                    record["body"], tuple(record["messages"]), record["owner"], record["agent"]
                )
                if reader.may_read_run(stored.owner, stored.agent):
                    return stored
                raise self._not_found(response_id)
        return self.get(response_id, reader)

    async def forget(self, response_id: str, reader: Caller) -> None:
        """Delete a response ``reader`` may read, here and in the fleet's Redis (there
        first: a delete the fleet did not take is refused, ``SessionStoreUnavailable``);
        ``ResponseNotFound`` as for ``find``."""
        await self.find(response_id, reader)
        if self.shared is not None:
            await self.shared.forget("response", response_id)
        kept = self._kept.pop(response_id, None)
        self._in_fleet.discard(response_id)
        if kept is not None:
            self.bytes -= kept[1]

    def put(self, stored: StoredResponse) -> StoredResponse:
        """Keep ``stored`` in this process, its conversation cut to the history budget
        (what is kept is returned)."""
        sizes = [len(json.dumps(m, ensure_ascii=False).encode()) for m in stored.messages]
        newest_first = (
            (i, sizes[i], stored.messages[i].get("role")) for i in reversed(range(len(sizes)))
        )
        cut = first_kept(newest_first, self.history_bytes)
        cut = len(sizes) if cut is None else cut
        stored = replace(stored, messages=stored.messages[cut:])
        size = sum(sizes[cut:]) + len(json.dumps(stored.body, ensure_ascii=False).encode())
        old = self._kept.pop(stored.body["id"], None)
        if old is not None:
            self.bytes -= old[1]
        self._kept[stored.body["id"]] = (stored, size)
        self.bytes += size
        while len(self._kept) > 1 and (len(self._kept) > self._max or self.bytes > self.max_bytes):
            dropped_id, (_, dropped) = self._kept.popitem(last=False)
            self._in_fleet.discard(dropped_id)
            self.bytes -= dropped
        return stored

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, response_id: str, reader: Caller) -> StoredResponse:
        """The response, if ``reader`` made it (or is an admin); else ``ResponseNotFound``,
        the same answer as for an id never stored."""
        kept = self._kept.get(response_id)
        if kept is None or not reader.may_read_run(kept[0].owner, kept[0].agent):
            raise self._not_found(response_id)
        return kept[0]

    def _not_found(self, response_id: str) -> ResponseNotFound:
        return ResponseNotFound(
            f"no stored response {response_id!r}; only the last {self._max} "
            "responses created with store: true by this API key are kept"
        )
