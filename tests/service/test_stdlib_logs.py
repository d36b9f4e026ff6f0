"""Every logger of the process goes through the one masking sink: aiohttp's own
``aiohttp.server`` lines and the Nacos SDK's root-logger lines are masked loguru lines (a
request aiohttp cannot parse is one line of the service's own, without what was sent), and
a repeated connection error is one line per state change, not one per retry."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from loguru import logger

from dynagent.logs import RepeatGate, StdlibBridge, configure_logging, state_changed
from tests.support.process import free_port, serve_process, write_config

KEY = "sk-live-SECRET-0123456789abcdef"
MALFORMED = [
    f"GET /v1/agents?key={KEY} HTTP/1.1\x01\r\nHost: x\r\n\r\n".encode(),
    f"GET /{KEY}\x00 HTTP/1.1\r\n\r\n".encode(),
    f"GET /x HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\nX-Bad\x7f: {KEY}\r\n\r\n".encode(),
]


async def _send(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    answer = await reader.read(200)
    writer.close()
    await writer.wait_closed()
    return answer


async def test_a_malformed_request_line_carrying_a_key_is_logged_masked(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "keys.yaml").write_text(f"keys:\n  - name: a\n    key: {KEY}\n", encoding="utf-8")
    config = write_config(
        tmp_path,
        {
            "auth": {"keys_file": "keys.yaml"},
            "sessions": {"path": "state/sessions.db"},
            "factories": {"default": {"directory": "agents"}},
        },
    )
    async with serve_process(config, free_port()) as served:
        answers = [await _send(served.port, raw) for raw in MALFORMED]
        line = await served.wait_log("an unreadable request from 127.0.0.1 answered 400")
        served.terminate()
        assert await served.exit_code(within=20) == 0

    print("\n" + "\n".join(served.log))
    assert {answer.split(b"\r\n")[0] for answer in answers} == {b"HTTP/1.0 400 Bad Request"}
    assert [entry for entry in served.log if KEY in entry] == []
    # One line that names what was wrong, none of what was sent, and no traceback.
    assert line.endswith(": BadStatusLine") and "Traceback" not in "\n".join(served.log)
    # Every line is a loguru line of the one sink: time | level | trace id | message.
    assert all(entry.count(" | ") >= 3 for entry in served.log), served.log


@pytest.fixture
def lines() -> Iterator[list[str]]:
    configure_logging("INFO").add([KEY])
    for handler in logging.getLogger().handlers:  # what earlier tests logged is not counted
        if isinstance(handler, StdlibBridge):
            handler.gate = RepeatGate()
    found: list[str] = []
    sink = logger.add(lambda m: found.append(m.record["message"]), level="INFO")
    yield found
    logger.remove(sink)
    logger.remove()
    logger.configure(patcher=lambda record: None, extra={})
    logger.add(sys.stderr)


def test_a_repeated_connection_error_is_one_line_per_state_change(lines: list[str]) -> None:
    for attempt in range(38):  # what the Nacos SDK logs through the root logger, per retry
        logging.error(f"failed to connect server, error = attempt {attempt} with {KEY}")
    state_changed()  # reachable again
    logging.error("failed to connect server, error = attempt 99")
    logging.getLogger("aiohttp.server").warning("something else")

    assert lines == [
        "root: failed to connect server, error = attempt 0 with ***",
        "root: failed to connect server, error = attempt 99 (37 repeated line(s) held back "
        "before this)",
        "aiohttp.server: something else",
    ]
