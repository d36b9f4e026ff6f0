"""How a config source is doing now, shared live by every definition it handed out.

An ``Agent`` is immutable, but whether Nacos still answers is not a fact about
the definition: it changes under it. The source owns one ``SourceHealth`` and
updates it; each agent's status reads it when asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

SourceState = Literal["live", "snapshot", "disconnected"]


@dataclass(slots=True)
class SourceHealth:
    """Whether the source reaches its server, and since when."""

    reachable: bool = True
    since: float = field(default_factory=time.time)

    def set(self, reachable: bool) -> None:
        if reachable != self.reachable:
            self.reachable = reachable
            self.since = time.time()

    def state_of(self, from_snapshot: bool) -> SourceState:
        """``snapshot``: read from Dynagent's own copy, not yet confirmed by the server;
        ``disconnected``: came from the server, which does not answer now."""
        if self.reachable:
            return "live"
        return "snapshot" if from_snapshot else "disconnected"
