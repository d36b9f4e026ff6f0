"""Slots for the long-lived streams a caller holds open (``GET /v1/watch/agents``): at most
``total`` on this replica and ``per_key`` for one identity, so that no key, and no crowd
of them, can keep enough streams open to slow the service for everyone (1,200 open watch
streams took ``/healthz`` to a median of 278 ms)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from dynagent.core.auth import Caller
from dynagent.exceptions import TooManyStreams
from dynagent.sessions.scope import ANONYMOUS


class StreamSlots:
    """Counts open streams, in all and per identity (``Caller.principal``). With auth off
    every caller is ``anonymous``: only the total applies."""

    def __init__(self, total: int, per_key: int) -> None:
        self.total = total
        self.per_key = per_key
        self._open: Counter[str] = Counter()

    @property
    def open(self) -> int:
        """Streams open now."""
        return sum(self._open.values())

    @contextmanager
    def hold(self, who: Caller) -> Iterator[None]:
        """One slot for ``who`` while the block runs; ``TooManyStreams`` (429) when full."""
        if self.open >= self.total:
            raise TooManyStreams(
                f"{self.total} watch streams are open on this replica "
                "(listen.max_watch_streams); try again later"
            )
        key = who.principal
        if key != ANONYMOUS and self._open[key] >= self.per_key:
            raise TooManyStreams(
                f"this API key has {self.per_key} watch streams open "
                "(listen.max_watch_streams_per_key); close one first"
            )
        self._open[key] += 1
        try:
            yield
        finally:
            self._open[key] -= 1
            if not self._open[key]:
                del self._open[key]
