"""The one way the service compiles a regular expression: RE2, linear time.

Python's ``re`` backtracks: a pattern as plain as the e-mail one took quadratic
time on a long word without ``@``, and the old code-fence pattern cubic time on
spaces. RE2 matches in time linear in the text whatever the pattern
and the input, so text from outside (request bodies, tool results, model output)
cannot stall the service through a pattern. RE2 has no lookaround and no
backreferences: a pattern that needs them does not compile, which is the point.
``tests/test_layout.py`` keeps ``import re`` out of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import re2

from dynagent._compat import re2 as re2_compat


class Match(Protocol):
    def group(self, index: int = 0, /) -> str | None: ...
    def start(self, index: int = 0, /) -> int: ...
    def end(self, index: int = 0, /) -> int: ...


class _Compiled(Protocol):
    @property
    def pattern(self) -> str: ...
    def search(self, text: str, pos: int = 0, /) -> Match | None: ...
    def match(self, text: str, /) -> Match | None: ...
    def fullmatch(self, text: str, /) -> Match | None: ...
    def finditer(self, text: str, /) -> Iterator[Match]: ...
    def sub(self, repl: str | Callable[[Match], str], text: str, /) -> str: ...


_NO_MATCH = re2_compat.NO_MATCH


class Pattern:
    """An RE2 pattern: ``re``'s ``search``/``finditer``/``sub``, plus ``replace``."""

    __slots__ = ("_compiled", "_find")

    def __init__(self, compiled: _Compiled) -> None:
        self._compiled = compiled
        self._find = re2_compat.span_finder(compiled)

    @property
    def pattern(self) -> str:
        return self._compiled.pattern

    @property
    def program_size(self) -> int:
        """RE2's program size: what compiling, matching and keeping it cost grow with."""
        return re2_compat.program_size(self._compiled)

    def search(self, text: str, pos: int = 0) -> Match | None:
        return self._compiled.search(text, pos)

    def match(self, text: str) -> Match | None:
        """A match at the start of ``text``."""
        return self._compiled.match(text)

    def fullmatch(self, text: str) -> Match | None:
        """A match of the whole of ``text``."""
        return self._compiled.fullmatch(text)

    def finditer(self, text: str) -> Iterator[Match]:
        return self._compiled.finditer(text)

    def sub(self, repl: str | Callable[[Match], str], text: str) -> str:
        return self._compiled.sub(repl, text)

    def spans(self, text: str, group: int = 0) -> list[tuple[int, int]]:
        """(start, end) character offsets of ``group`` in every match, left to right.

        ``finditer`` with the same result costs time quadratic in the number of matches
        (each match object converts its offsets from the start of the text); here the
        text is encoded once and offsets are converted as the scan moves forward."""
        data = text.encode()
        size, at, chars, found = len(data), 0, 0, []
        end, ascii_only = 0, len(data) == len(text)  # then bytes and characters line up
        while end <= size:
            spans = self._find(data, end, size)
            start, stop = spans[0]
            if start == _NO_MATCH:
                break
            first, last = spans[group]
            if first != _NO_MATCH and ascii_only:
                found.append((first, last))
            elif first != _NO_MATCH:
                chars += len(data[at:first].decode())
                length = len(data[first:last].decode())
                found.append((chars, chars + length))
                chars, at = chars + length, last
            end = stop if stop > start else stop + max(1, re2_compat.character_bytes(data, stop))
        return found

    def replace(self, text: str, mask: str, keep: int = 0) -> str:
        """Every match replaced by ``mask`` (after the text of group ``keep``, if any).

        ``sub`` with the same effect, about four times faster on a text full of
        matches: the text is encoded once and matched on bytes, where ``sub`` builds
        a match object and converts offsets for each match."""
        data = text.encode()
        end, size = 0, len(data)
        if self._find(data, 0, size)[0][0] == _NO_MATCH:
            return text
        encoded_mask = mask.encode()
        pieces: list[bytes] = []
        while end <= size:
            spans = self._find(data, end, size)
            start, stop = spans[0]
            if start == _NO_MATCH:
                break
            pieces.append(data[end:start])
            if keep and spans[keep][0] != _NO_MATCH:
                pieces.append(data[spans[keep][0] : spans[keep][1]])
            pieces.append(encoded_mask)
            if stop == start:  # an empty match: step over one character
                step = re2_compat.character_bytes(data, stop)
                pieces.append(data[stop : stop + step])
                stop += max(1, step)
            end = stop
        pieces.append(data[end:])
        return b"".join(pieces).decode()


error = re2.error
"""Raised for a pattern RE2 does not accept (lookaround, backreferences, bad syntax)."""


def _options(max_mem: int | None = None) -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our error to report, not RE2's to print
    if max_mem is not None:
        options.max_mem = max_mem
    return options


_OPTIONS = _options()


def compile(pattern: str, *, max_mem: int | None = None) -> Pattern:
    """``pattern`` compiled by RE2 (``error`` when it uses what RE2 refuses).

    ``max_mem`` bounds the memory RE2 gives the program and its matching caches (RE2's
    default: 8 MiB); a pattern whose program does not fit is refused (``error``)."""
    options = _OPTIONS if max_mem is None else _options(max_mem)
    return Pattern(cast(_Compiled, re2.compile(pattern, options)))
