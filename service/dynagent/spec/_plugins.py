"""Installed plugins (entry points), found once per process.

``importlib.metadata.entry_points`` reads every installed package's metadata: ~20 ms of
file reads a group, which held the event loop each time an app built its registries.
A package installed later needs a restart to be imported anyway.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import EntryPoint, entry_points


@cache
def plugin_points(group: str) -> tuple[EntryPoint, ...]:
    """The entry points of ``group``; the first call per group reads the metadata."""
    return tuple(entry_points(group=group))
