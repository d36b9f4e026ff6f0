"""At most ``MAX_MESSAGE_BYTES`` of one line read from a stdio server.

The SDK's stdio transport splits the server's output into lines by joining what it has
to each chunk read: one line of 200 MB was held whole and re-joined chunk after chunk
(time quadratic in its length). Here the bytes pass through ``BoundedLines`` first: it
hands on complete lines only, and a line past the bound is dropped as it arrives; the
request it answered gets an error naming the bound instead.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
from anyio.abc import ByteReceiveStream
from anyio.streams.text import TextReceiveStream
from mcp_types.jsonrpc import CONNECTION_CLOSED

from dynagent import _regex
from dynagent._compat import mcp as mcp_compat

_HEAD = 512
"""Bytes kept of a line dropped, to find the id of the request it answered."""
_ID = _regex.compile(r'"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")')


class BoundedLines(ByteReceiveStream):
    """``stream``'s bytes as complete lines, none longer than ``limit`` bytes."""

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream = stream
        self._limit = limit
        self._line = bytearray()
        self._dropping = False
        self._head = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        while True:
            try:
                chunk = await self._stream.receive(max_bytes)
            except anyio.EndOfStream:
                if self._line and not self._dropping:  # a last line without its newline
                    rest, self._line = bytes(self._line), bytearray()
                    return rest
                raise
            out = self._lines(chunk)
            if out:
                return out

    def _lines(self, chunk: bytes) -> bytes:
        out: list[bytes] = []
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline + 1
            self._take(chunk[start:end], out)
            start = end
        return b"".join(out)

    def _take(self, part: bytes, out: list[bytes]) -> None:
        ended = part.endswith(b"\n")
        if self._dropping:
            if ended:
                self._dropping = False
                out.append(_refusal(self._head, self._limit))
            return
        if len(self._line) + len(part) > self._limit + 1:
            self._head = bytes((self._line + part)[:_HEAD])
            self._line = bytearray()
            if ended:
                out.append(_refusal(self._head, self._limit))
            else:
                self._dropping = True
            return
        self._line += part
        if ended:
            out.append(bytes(self._line))
            self._line = bytearray()

    async def aclose(self) -> None:
        await self._stream.aclose()


def _refusal(head: bytes, limit: int) -> bytes:
    """An error answer to the request a dropped line answered (nothing when its id is not
    among the line's first bytes: the call then ends at its timeout)."""
    found = _ID.search(head.decode("utf-8", errors="replace"))
    if found is None:
        return b""
    error = {
        "code": CONNECTION_CLOSED,
        "message": f"the MCP server's answer exceeded the {limit} byte limit",
    }
    answer = {"jsonrpc": "2.0", "id": json.loads(found.group(1) or "null"), "error": error}
    return json.dumps(answer).encode() + b"\n"


def bound_stdio(limit: int) -> None:
    """Make the SDK's stdio transport read its servers through ``BoundedLines``."""

    def text_stream(stream: Any, encoding: str = "utf-8", errors: str = "strict") -> Any:
        return TextReceiveStream(BoundedLines(stream, limit), encoding=encoding, errors=errors)

    mcp_compat.replace_stdio_text_stream(text_stream)
