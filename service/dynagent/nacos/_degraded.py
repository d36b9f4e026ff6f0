"""Why a Nacos source is degraded: every reason at once, each kept until it clears."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from loguru import logger

from dynagent.logs import state_changed
from dynagent.runtime._health import SourceHealth

Kind = Literal["connection", "snapshot"]
"""``connection``: Nacos cannot be reached; ``snapshot``: snapshot files were skipped at a
start while Nacos was down (cleared once Nacos serves the group again)."""

HealthCallback = Callable[[str | None], None]
"""Told the reason the source is degraded, or None when it is healthy again."""


class Degradation:
    """The reasons by kind; one replacing another of its kind never drops the others (a
    reconnect attempt failing must not hide the snapshot files skipped at start)."""

    def __init__(self, location: str, health: SourceHealth, on_health: HealthCallback) -> None:
        self.location = location
        self.health = health
        self.on_health = on_health
        self.reasons: dict[Kind, str] = {}
        self.text: str | None = None
        """Every reason now, joined; None when the source is healthy."""

    def set(self, reason: str | None, kind: Kind) -> None:
        """Set or (``None``) clear the reason of ``kind``."""
        had = self.reasons.get("connection")
        if reason is None:
            self.reasons.pop(kind, None)
        else:
            self.reasons[kind] = reason
        text = "; ".join(self.reasons[k] for k in sorted(self.reasons)) or None
        if text == self.text:
            return
        state_changed()  # the SDK's repeated connection errors may show once for this state
        now = self.reasons.get("connection")
        if now is None and had is not None:
            logger.info("Nacos source {} is reachable again", self.location)
        elif now is not None and had is None:
            logger.warning("Nacos source {}: {}", self.location, now)
        self.text = text
        self.health.set(reachable=now is None)
        self.on_health(text)
