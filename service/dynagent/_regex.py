"""The one way the service compiles a regular expression: RE2, linear time.

Python's ``re`` backtracks: a pattern as plain as the e-mail one took quadratic
time on a long word without ``@``, and the old code-fence pattern cubic time on
spaces (issue 11). RE2 matches in time linear in the text whatever the pattern
and the input, so text from outside (request bodies, tool results, model output)
cannot stall the service through a pattern. RE2 has no lookaround and no
backreferences: a pattern that needs them does not compile, which is the point.
``tests/test_layout.py`` keeps ``import re`` out of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import re2


class Match(Protocol):
    def group(self, index: int = 0, /) -> str | None: ...
    def start(self, index: int = 0, /) -> int: ...
    def end(self, index: int = 0, /) -> int: ...


class Pattern(Protocol):
    @property
    def pattern(self) -> str: ...
    def search(self, text: str, pos: int = 0, /) -> Match | None: ...
    def finditer(self, text: str, /) -> Iterator[Match]: ...
    def sub(self, repl: str | Callable[[Match], str], text: str, /) -> str: ...


error = re2.error
"""Raised for a pattern RE2 does not accept (lookaround, backreferences, bad syntax)."""


def _options() -> Any:
    options = re2.Options()
    options.log_errors = False  # a refused pattern is our error to report, not RE2's to print
    return options


_OPTIONS = _options()


def compile(pattern: str) -> Pattern:
    """``pattern`` compiled by RE2 (``error`` when it uses what RE2 refuses)."""
    return cast(Pattern, re2.compile(pattern, _OPTIONS))
