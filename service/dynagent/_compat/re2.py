"""google-re2's internals: the RE2 object under a compiled pattern.

``re2``'s Python API (``search``, ``sub``) converts offsets between text and UTF-8 and
builds a match object for each match. ``_regex.Pattern.replace`` matches on the bytes
once encoded instead, with RE2's own ``Match`` on the object a compiled pattern keeps in
``_regexp``, from the private extension module ``re2._re2``: about four times faster on a
text full of matches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from dynagent._compat.versions import Tested

TESTED = Tested("google-re2", "1.1.20251105", "1.2")
PRIVATE_PARTS = (
    "re2:_Regexp._regexp",
    "re2:_re2.RE2.ProgramSize",
    "re2:_re2.RE2.Match",
    "re2:_re2.RE2.Anchor.UNANCHORED",
    "re2:_re2.CharLenToBytes",
)
"""What this module reaches, as ``module:attribute``."""
NO_MATCH = -1
"""The start and end of a span that did not match."""

Spans = Sequence[tuple[int, int]]
"""The byte spans of the whole match and of each group (``NO_MATCH`` when it has none)."""


def check() -> None:
    TESTED.check()


def span_finder(compiled: object) -> Callable[[bytes, int, int], Spans]:
    """``find(data, start, end)``: the spans of the first match of the pattern ``compiled``
    (what ``re2.compile`` returns) in ``data[start:end]``, UTF-8 bytes; one call into RE2."""
    from re2 import _re2

    program = compiled._regexp  # type: ignore[attr-defined]
    find: Callable[[bytes, int, int], Spans] = functools.partial(
        program.Match, _re2.RE2.Anchor.UNANCHORED
    )
    return find


def character_bytes(data: bytes, at: int) -> int:
    """The length in bytes of the UTF-8 character at byte ``at`` of ``data``."""
    from re2 import _re2

    length: int = _re2.CharLenToBytes(data, at, 1)
    return length


def program_size(compiled: object) -> int:
    """The size of RE2's program for the pattern ``compiled`` (what ``re2.compile`` returns):
    its instructions, what matching and the memory it keeps grow with."""
    size: int = compiled._regexp.ProgramSize()  # type: ignore[attr-defined]
    return size
