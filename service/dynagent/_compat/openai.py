"""openai's internals: the aiohttp response under its aiohttp transport.

``openai.DefaultAioHttpClient`` serves each response through a vendored transport whose
stream (``AiohttpResponseStream``) keeps the aiohttp response in ``_aiohttp_response``;
the model client reads a stream's body from it directly, so that it can pace the reads
of a flood (``dynagent._compat.aiohttp``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    import aiohttp

TESTED = Tested("openai", "3.60.0", "3.61")
PRIVATE_PARTS = ("openai._vendor.httpx_aiohttp.transport:AiohttpResponseStream",)
"""What this module reaches, as ``module:attribute``; ``_aiohttp_response``, which each
stream sets for itself, is checked on a response by ``tests/runtime/test_compat.py``."""


def check() -> None:
    TESTED.check()


def aiohttp_response(stream: object) -> aiohttp.ClientResponse | None:
    """The aiohttp response a transport stream of ``DefaultAioHttpClient`` reads, or None
    for any other stream."""
    import aiohttp

    body = getattr(stream, "_aiohttp_response", None)
    return body if isinstance(body, aiohttp.ClientResponse) else None
