"""Every use of a dependency's private parts, one module per dependency.

Outside this package, Dynagent touches no attribute or module of a dependency named
``_…``, patches none of its tables, and reaches none of its internals: it calls the small
functions here instead. Each module names the version range of its dependency that was
tested (``TESTED``, the same as in pyproject.toml) and what it reaches
(``PRIVATE_PARTS``); ``check_all()``, called when the service starts, refuses to run on
an untested version, and ``tests/runtime/test_compat.py`` fails when an upgrade moves
one of those parts or when code elsewhere reaches a private attribute again.

Importing this package imports none of the dependencies: a version is read from the
installed distribution's metadata, and each dependency is imported when a function of
its module is first used.
"""

from __future__ import annotations

from typing import Protocol

from dynagent._compat import aiohttp, httpx2, loguru, mcp, nacos, openai, opentelemetry, re2
from dynagent._compat.versions import Tested, UntestedDependency

__all__ = ["MODULES", "CompatModule", "Tested", "UntestedDependency", "check_all"]


class CompatModule(Protocol):
    """What each module of this package has."""

    @property
    def TESTED(self) -> Tested: ...
    @property
    def PRIVATE_PARTS(self) -> tuple[str, ...]: ...

    def check(self) -> None: ...


MODULES: tuple[CompatModule, ...] = (
    aiohttp,
    httpx2,
    loguru,
    mcp,
    nacos,
    openai,
    opentelemetry,
    re2,
)
_checked = False


def check_all() -> None:
    """Raise ``UntestedDependency`` (a ``StartupError``) for the first dependency installed
    at a version outside its tested range; checked once per process."""
    global _checked  # noqa: PLW0603 (one check per process: create_app runs it per app)
    if _checked:
        return
    for module in MODULES:
        module.check()
    _checked = True
