"""What every config source hands out: documents and change events."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from dynagent.runtime.agent import SourceInfo
from dynagent.spec.agent import Format


@dataclass(frozen=True, slots=True)
class Document:
    """One agent definition as text, or its removal (``text is None``)."""

    key: str
    """Identifies the document within its source: a file name, a dataId."""
    text: str | None
    fmt: Format
    info: SourceInfo
    error: str | None = None
    """Set when the source could not read the document (too large, not UTF-8 …)."""


OnChange = Callable[[Document], Awaitable[bool]]
"""Applies a document; True when it was accepted (served, or its removal done), False when
it was refused and what served before still serves. A source keeps a copy of what was
accepted only (the Nacos snapshot), never of what was refused."""


class ConfigSource(Protocol):
    async def start(self, on_change: OnChange) -> None:
        """Hand every current document to ``on_change``, then keep reporting changes."""
        ...

    async def stop(self) -> None: ...


def is_canary_key(key: str) -> bool:
    """``{name}.canary.yaml``: a candidate version of an agent (see canary rollouts)."""
    return ".canary." in key
