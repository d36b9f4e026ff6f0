"""Tested version ranges, and the check that refuses an installed version outside one.

A dependency's private parts (attributes and modules named ``_…``, internals reached
through its objects, its tables patched for the whole process) carry no promise from
one release to the next. Each ``_compat`` module names the range of its dependency that
Dynagent was tested with; ``check()`` compares the installed distribution's version
(read from its metadata: the dependency itself is not imported) and refuses any other,
so that an untested upgrade fails at start in one line instead of somewhere at run time.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from importlib import metadata

from dynagent.exceptions import StartupError


class UntestedDependency(StartupError):
    """A dependency whose private parts Dynagent uses is installed at a version outside
    the range Dynagent was tested with."""


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version (``3.14.5`` → ``(3, 14, 5)``). What follows them
    (``rc1``, ``.post1``, ``+local``) is ignored: ``4.0.0rc1`` counts as ``4.0.0``, so a
    pre-release of the next untested version is refused with it."""
    numbers: list[int] = []
    for part in version.strip().split("."):
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        numbers.append(int(digits))
        if len(digits) < len(part):
            break
    if not numbers:
        raise ValueError(f"not a version number: {version!r}")
    return tuple(numbers)


def _padded(numbers: tuple[int, ...], size: int) -> tuple[int, ...]:
    return numbers + (0,) * (size - len(numbers))


@dataclass(frozen=True, slots=True)
class Tested:
    """The versions of ``distribution`` Dynagent was tested with: ``lowest`` up to, not
    including, ``below``."""

    distribution: str
    lowest: str
    below: str

    @property
    def requirement(self) -> str:
        """As pip and pyproject.toml write it: ``aiohttp>=3.14.5,<3.15``."""
        return f"{self.distribution}>={self.lowest},<{self.below}"

    def problem(self, installed: str) -> str | None:
        """Why ``installed`` must not be used (a message saying how to fix it), or None
        when it is in the tested range."""
        try:
            version = release(installed)
        except ValueError:
            version = ()
        size = max(len(version), len(release(self.lowest)), len(release(self.below)))
        found = _padded(version, size)
        if version and _padded(release(self.lowest), size) <= found < _padded(
            release(self.below), size
        ):
            return None
        return (
            f"{self.distribution} {installed} is installed, but Dynagent was tested with "
            f"{self.distribution} >={self.lowest},<{self.below} only: it relies on parts of "
            f"{self.distribution} that are not its public API and may differ in another "
            f"version. Install a tested version: pip install '{self.requirement}'"
        )

    def check(self) -> None:
        """Raise ``UntestedDependency`` if the installed version is outside the range;
        nothing to check when the distribution is not installed (an optional extra)."""
        try:
            installed = metadata.version(self.distribution)
        except metadata.PackageNotFoundError:
            return
        problem = self.problem(installed)
        if problem is not None:
            raise UntestedDependency(problem)
