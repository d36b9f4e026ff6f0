"""aiohttp's connection, paused under its feet.

Pacing the reads of a model's flood (``models/_sse.py``) stops the socket of an aiohttp
response from being read for a moment: the kernel gathers what arrives, and one read
takes it all. aiohttp offers no API for that; its client protocol pauses and resumes the
same transport for its own flow control (when its buffer fills), so this relies on how
the two interleave: nothing is paused when aiohttp has paused reading itself, and reading
resumes before aiohttp's buffer is read again.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    import aiohttp

TESTED = Tested("aiohttp", "3.14.5", "3.15")
PRIVATE_PARTS = (
    "aiohttp.client_reqrep:ClientResponse.connection",
    "aiohttp.connector:Connection.transport",
)
"""What this module reaches, as ``module:attribute``."""


def check() -> None:
    TESTED.check()


async def leave_unread(response: aiohttp.ClientResponse, seconds: float) -> None:
    """Leave the socket of ``response`` unread for ``seconds``. Nothing is held (nor
    waited for) when aiohttp paused reading itself or the connection is gone."""
    connection = response.connection
    transport = connection.transport if connection is not None else None
    if transport is None or not transport.is_reading():
        return
    transport.pause_reading()
    try:
        await asyncio.sleep(seconds)
    finally:
        if not transport.is_closing():
            transport.resume_reading()
