"""Documents that ride beside an agent without defining it (its evaluation suite …).

A feature package keeps, per agent name and kind, one value with a ``status()``; the
agent's status shows it under the kind's name. An attachment never touches what the
agent serves: a broken one is refused on its own, beside a healthy agent.
"""

from __future__ import annotations

from typing import Any, Protocol

from dynagent.registry.readiness import Changes


class Attachment(Protocol):
    def status(self) -> dict[str, Any]:
        """What the agent's status shows under the attachment's kind."""
        ...


class Attachments:
    """Agent name → kind → attachment. Every change bumps the shared change counter."""

    def __init__(self, changes: Changes) -> None:
        self.changes = changes
        self._held: dict[str, dict[str, Attachment]] = {}
        self._versions: dict[str, int] = {}

    def version(self, name: str) -> int:
        """How many times what is attached to ``name`` has changed (a live view of the
        agent's status resends it when this moves)."""
        return self._versions.get(name, 0)

    def get(self, name: str, kind: str) -> Attachment | None:
        return self._held.get(name, {}).get(kind)

    def put(self, name: str, kind: str, attachment: Attachment) -> None:
        self._held.setdefault(name, {})[kind] = attachment
        self._versions[name] = self._versions.get(name, 0) + 1
        self.changes.bump()

    def remove(self, name: str, kind: str) -> None:
        held = self._held.get(name, {})
        if held.pop(kind, None) is not None:
            if not held:
                del self._held[name]
            self._versions[name] = self._versions.get(name, 0) + 1
            self.changes.bump()

    def status_of(self, name: str) -> dict[str, Any]:
        """Kind → status of each attachment of ``name``."""
        return {kind: held.status() for kind, held in sorted(self._held.get(name, {}).items())}
