"""openai: the versions tested.

The model client no longer goes through the ``openai`` client (``models/_endpoint.py``
posts on aiohttp's), but raises its exceptions and reads their fields, so the range of
versions those were tested with is still checked.
"""

from __future__ import annotations

from dynagent._compat.versions import Tested

TESTED = Tested("openai", "3.60.0", "3.61")
PRIVATE_PARTS: tuple[str, ...] = ()
"""What this module reaches, as ``module:attribute``: nothing private."""


def check() -> None:
    TESTED.check()
