"""The kinds of ``tools`` entries an AgentSpec accepts, by their ``type``.

A kind is an object with a ``type`` (what an entry writes as ``type:``) and an
``entry`` (the pydantic model that entry is validated with); the runtime's
``ToolKind`` adds how its tools are built. Kinds come from the entry-point group
``dynagent.tool_kinds``: Dynagent declares its own there like any plugin, and a
third-party package adds one by declaring it too. The group is read once, the
first time an entry with a ``type`` is validated, and kept for the process.

The spec layer never imports a kind's module itself: ``BUILTIN_KINDS`` names
Dynagent's own kinds by entry-point value, for a checkout whose installed
metadata predates the group (an editable install made before it existed).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from importlib.metadata import EntryPoint
from typing import Generic, Protocol, TypeVar

from loguru import logger
from pydantic import BaseModel

from dynagent.spec._plugins import plugin_points

GROUP = "dynagent.tool_kinds"

BUILTIN_KINDS = {
    "ref": "dynagent.tools.named:KIND",
    "http": "dynagent.tools.http:KIND",
    "mcp": "dynagent.mcp.kind:KIND",
    "agent": "dynagent.a2a.kind:KIND",
}
"""Dynagent's own kinds, as ``pyproject.toml`` declares them in ``GROUP``."""

EntryModel = type[BaseModel]

REQUIRED_FIELDS = ("type", "name")
"""Every kind's entry has a ``type`` (its kind) and a ``name`` (its place in paths:
``tools[name]``; two entries may not share one)."""


class EntryKind(Protocol):
    """What the spec layer needs of a kind: its ``type`` and its entry's model."""

    @property
    def type(self) -> str: ...

    @property
    def entry(self) -> EntryModel: ...


K = TypeVar("K", bound=EntryKind)


class Kinds(Generic[K]):
    """Kinds by ``type``, in the order they were registered; one kind per type."""

    def __init__(self, kinds: Iterable[K] = ()) -> None:
        self._kinds: dict[str, K] = {}
        for kind in kinds:
            self.register(kind)

    def register(self, kind: K) -> K:
        """Add ``kind``; ``ValueError`` for a type already taken or an entry model
        without the fields every entry has."""
        if not isinstance(kind.type, str) or not kind.type:
            raise ValueError(f"a tool kind's type must be a non-empty string, not {kind.type!r}")
        if kind.type in self._kinds:
            raise ValueError(f"tool kind {kind.type!r} is already registered")
        entry = getattr(kind, "entry", None)
        if not (isinstance(entry, type) and issubclass(entry, BaseModel)):
            raise ValueError(f"tool kind {kind.type!r}: its entry is not a pydantic model")
        missing = [name for name in REQUIRED_FIELDS if name not in entry.model_fields]
        if missing:
            raise ValueError(
                f"tool kind {kind.type!r}: its entry {entry.__name__} has no field "
                + ", ".join(map(repr, missing))
            )
        self._kinds[kind.type] = kind
        return kind

    def get(self, type_: str) -> K | None:
        return self._kinds.get(type_)

    def types(self) -> list[str]:
        return sorted(self._kinds)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._kinds.values()))

    def __len__(self) -> int:
        return len(self._kinds)


def kind_points(found: Iterable[EntryPoint] | None = None) -> list[EntryPoint]:
    """The group's entry points (``found``: those installed), each once: Dynagent's own
    first (``BUILTIN_KINDS`` standing in for any not installed), then the others by name."""
    points = plugin_points(GROUP) if found is None else found
    unique = {(point.name, point.value): point for point in points}
    for name, value in BUILTIN_KINDS.items():
        unique.setdefault((name, value), EntryPoint(name, value, GROUP))
    builtin = list(BUILTIN_KINDS.items())

    def order(key: tuple[str, str]) -> tuple[int, tuple[str, str]]:
        return (builtin.index(key), key) if key in builtin else (len(builtin), key)

    return [unique[key] for key in sorted(unique, key=order)]


def load_kinds(
    points: Iterable[EntryPoint], into: Kinds[EntryKind] | None = None
) -> Kinds[EntryKind]:
    """Kinds from ``points`` (each names a kind object, or a class made with no
    arguments), added to ``into``. One that fails to load, or claims a type already
    taken, is logged and left out: entries of its type are refused as of an unknown type."""
    kinds: Kinds[EntryKind] = Kinds() if into is None else into
    for point in points:
        try:
            loaded = point.load()
            kind = loaded() if isinstance(loaded, type) else loaded
            if getattr(kind, "type", None) != point.name:
                raise ValueError(f"its type is {getattr(kind, 'type', None)!r}, not {point.name!r}")
            kinds.register(kind)
        except Exception as exc:  # a broken plugin must not stop the service
            logger.error("tool kind {} ({}) left out: {}", point.name, point.value, exc)
    return kinds


_lock = threading.RLock()
_registered: Kinds[EntryKind] | None = None


def registered() -> Kinds[EntryKind]:
    """The process's kinds: the entry-point group, read on the first call (a kind's
    module that validates a spec while it is imported sees those loaded before it)."""
    global _registered  # noqa: PLW0603 - loaded once, lazily: the kinds import the spec
    with _lock:
        if _registered is None:
            _registered = Kinds()
            load_kinds(kind_points(), into=_registered)
        return _registered


def unknown_type(type_: object, kinds: Kinds[K]) -> str:
    """What an entry of a type no kind has is told (its value only when it is a name)."""
    shown = f" {type_!r}" if isinstance(type_, str) and _is_name(type_) else ""
    return f"unknown tool type{shown}; known types: {', '.join(kinds.types()) or 'none'}"


def _is_name(text: str) -> bool:
    return 0 < len(text) <= 64 and all(c.isalnum() or c in "_.-" for c in text) and text.isascii()
