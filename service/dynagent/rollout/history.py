"""The audit trail of a rollout: every decision that changed a canary — who or what made
it (the guard, the analysis, the gate, a step, a person), when, and from what to what —
written into the canary's own document in the same compare-and-set as the decision, so
the fleet agrees on it and a restart keeps it. The latest ``KEPT`` entries are kept."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

KEPT = 50
RolloutEdit = Callable[[dict[str, Any]], bool]


def recorded(change: RolloutEdit, action: str, by: str, **details: Any) -> RolloutEdit:
    """``change``, and when it changes the document, an entry of the trail with it."""

    def edit(rollout: dict[str, Any]) -> bool:
        if not change(rollout):
            return False
        at = datetime.now(UTC).isoformat(timespec="milliseconds")
        entry = {"at": at, "by": by[:200], "action": action}
        entry |= {key: value for key, value in details.items() if value is not None}
        past = rollout.get("history")
        trail = [e for e in past if isinstance(e, dict)] if isinstance(past, list) else []
        rollout["history"] = [*trail, entry][-KEPT:]
        return True

    return edit
