"""Query parameters read alike on every route: a whole number within bounds."""

from __future__ import annotations

from dynagent import _regex
from dynagent.exceptions import BadRequest

_DIGITS = _regex.compile(r"[0-9]{1,4}")
"""Four digits at most: every bound is below 10,000."""


def whole_number(raw: str | None, name: str, *, default: int, most: int) -> int:
    """``raw`` (the query's ``name``) as a whole number from 1 to ``most``; ``default``
    when it is absent; else ``BadRequest`` naming the bounds."""
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or not 1 <= int(raw) <= most:
        raise BadRequest(f"{name} must be a whole number from 1 to {most}", param=name)
    return int(raw)
