"""A small, safe subset of JSONPath: ``$``, ``.name``, ``['name']`` and ``[index]``.

No filters, wildcards or expressions: a suite is configuration, and configuration never
names code. Parsing is one left-to-right pass; looking a path up touches one value per
step.
"""

from __future__ import annotations

from typing import Any

from dynagent import _regex

MAX_STEPS = 64

_STEP = _regex.compile(
    r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(-?[0-9]{1,9})\]|\['((?:[^'\\]|\\.){0,256})'\]"
    r"|\[\"((?:[^\"\\]|\\.){0,256})\"\]"
)

_ESCAPED = _regex.compile(r"\\(.)")
"""A backslash and the character it escapes inside a quoted name."""

Step = str | int

MISSING: Any = object()
"""What ``lookup`` returns for a path that leads nowhere."""


def parse_path(path: str) -> tuple[Step, ...]:
    """``$.a['b'][0]`` → ``('a', 'b', 0)``; ``ValueError`` naming what is not supported."""
    if not path.startswith("$"):
        raise ValueError("a JSON path starts with '$' (e.g. $.order.id)")
    steps: list[Step] = []
    at = 1
    while at < len(path):
        found = _STEP.match(path[at:])
        if found is None:
            raise ValueError(
                f"unsupported JSON path at {path[at : at + 20]!r}: use .name, ['name'] or [index]"
            )
        name, index = found.group(1), found.group(2)
        quoted = found.group(3) if found.group(3) is not None else found.group(4)
        if index is not None:
            steps.append(int(index))
        else:
            text = name if name is not None else quoted or ""
            steps.append(_ESCAPED.sub(lambda escaped: escaped.group(1) or "", text))
        at += found.end()
        if len(steps) > MAX_STEPS:
            raise ValueError(f"a JSON path has at most {MAX_STEPS} steps")
    return tuple(steps)


def lookup(value: Any, steps: tuple[Step, ...]) -> Any:
    """The value at ``steps`` inside ``value``, or ``MISSING``."""
    for step in steps:
        if not _holds(value, step):
            return MISSING
        value = value[step]
    return value


def _holds(value: Any, step: Step) -> bool:
    if isinstance(step, int):
        return isinstance(value, list) and -len(value) <= step < len(value)
    return isinstance(value, dict) and step in value
