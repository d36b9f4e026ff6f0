"""httpx2's internals: the stream a response wraps.

A response's ``stream`` is httpx2's ``BoundAsyncStream``, which keeps the transport's own
stream in ``_stream``; the model client reads a body straight from the transport under
it (``dynagent._compat.openai``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    import httpx2

TESTED = Tested("httpx2", "2.16.2", "2.17")
PRIVATE_PARTS = ("httpx2._client:BoundAsyncStream",)
"""What this module reaches, as ``module:attribute``; ``_stream``, which each stream sets
for itself, is checked on a response by ``tests/runtime/test_compat.py``."""


def check() -> None:
    TESTED.check()


def transport_stream(response: httpx2.Response) -> Any:
    """The transport's stream under ``response``, or None when httpx2 keeps none there."""
    return getattr(response.stream, "_stream", None)
