"""A notice: one rollout event as a webhook body, and its signature."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dynagent.registry.events import (
    AgentSwapped,
    CanaryPaused,
    CanaryPulled,
    CanaryResumed,
    CanaryStarted,
    CanaryWeightChanged,
    RegistryEvent,
)

SIGNATURE_HEADER = "X-Dynagent-Signature"
EVENT_HEADER = "X-Dynagent-Event"
DELIVERY_HEADER = "X-Dynagent-Delivery"


@dataclass(frozen=True, slots=True)
class Notice:
    event: str
    agent: str
    revision: str
    details: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    @property
    def delivery(self) -> str:
        """The same id on every replica that sees the same event, so that a receiver (or
        the fleet's claim) can tell a repeat."""
        what = json.dumps(
            [self.event, self.agent, self.revision, self.details], sort_keys=True, default=str
        )
        return hashlib.sha256(what.encode()).hexdigest()[:32]

    def as_dict(self) -> dict[str, Any]:
        return {
            "event": self.event,
            "agent": self.agent,
            "revision": self.revision,
            "at": self.at,
            "delivery": self.delivery,
            **dict(self.details),
        }

    def text(self) -> str:
        """One line for a person (the Slack format)."""
        said = {
            "published": "published {variant} revision {revision}",
            "gate": "gate {state} for canary {revision}",
            "step": "canary {revision} stepped to {weight:g} %",
            "pause": "canary {revision} paused by {by}: {reason}",
            "resume": "canary {revision} back in traffic",
            "promote": "canary {revision} promoted by {by}",
            "rollback": "rolled back to {revision} by {by}",
        }.get(self.event, "{event} {revision}")
        values: dict[str, Any] = {"revision": self.revision, "event": self.event}
        values |= {"by": "?", "reason": ""}
        values |= {"variant": "", "state": "", "weight": 0.0, **dict(self.details)}
        try:
            line = said.format(**values)
        except (KeyError, ValueError):
            line = f"{self.event} {self.revision}"
        return f"*{self.agent}*: {line}"

    def body(self, fmt: str) -> bytes:
        data = (
            {"text": self.text(), "dynagent": self.as_dict()} if fmt == "slack" else self.as_dict()
        )
        return json.dumps(data, ensure_ascii=False, sort_keys=True, default=str).encode()


def signature(secret: bytes, body: bytes) -> str:
    """``sha256=<hex>``: the HMAC-SHA256 of ``body`` under ``secret``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def notice_of(event: RegistryEvent) -> Notice | None:
    """The notice a registry change makes, if any."""
    made = _NOTICES.get(type(event))
    return None if made is None else made(event)


_NOTICES: dict[type[Any], Callable[[Any], Notice]] = {
    AgentSwapped: lambda e: Notice(
        "published", e.name, e.revision, {"variant": "stable", "previous": e.previous}
    ),
    CanaryStarted: lambda e: Notice(
        "published", e.name, e.revision, {"variant": "canary", "weight": e.weight}
    ),
    CanaryWeightChanged: lambda e: Notice(
        "step", e.name, e.revision, {"weight": e.weight, "previous": e.previous}
    ),
    CanaryPaused: lambda e: Notice("pause", e.name, e.revision, {"reason": e.reason, "by": e.by}),
    # This replica's guard pulled it; the pause it writes back is the same notice.
    CanaryPulled: lambda e: Notice(
        "pause", e.name, e.revision, {"reason": e.reason, "by": "guard"}
    ),
    CanaryResumed: lambda e: Notice("resume", e.name, e.revision),
}
