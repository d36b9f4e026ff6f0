"""A run's line waits, at most ``FLUSH_AFTER`` seconds, to be written with the others of
that time in one system call; nothing else is held back, and no line is lost or reordered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from loguru import logger

from dynagent.logs import FLUSH_AFTER, PENDING_LIMIT, MaskedStream, SecretMask, run_line
from dynagent.logs import configure_logging as configure
from tests.service.test_logging import restore_default_logging


class Recording:
    """A stream that keeps each write (one system call of the real stream) and can be
    waited on."""

    def __init__(self) -> None:
        self.writes: list[str] = []
        self.written = asyncio.Event()

    def write(self, text: str) -> None:
        self.writes.append(text)
        self.written.set()

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def lines(self) -> list[str]:
        return "".join(self.writes).splitlines()


@pytest.fixture
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recording]:
    recording = Recording()
    monkeypatch.setattr("sys.stderr", recording)
    configure("INFO")
    yield recording
    restore_default_logging()


async def test_the_lines_of_runs_that_end_together_are_one_write(stream: Recording) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    for index in range(20):
        run_line("INFO", f"t{index}", f"invoke bot@1 (stable) ok in {index} ms")
    assert stream.writes == []  # nothing yet: they wait for the others of that time
    await asyncio.wait_for(stream.written.wait(), 5)
    assert loop.time() - started >= FLUSH_AFTER * 0.9
    assert len(stream.writes) == 1
    assert [line.split(" | ")[2] for line in stream.lines] == [f"t{i}" for i in range(20)]


async def test_any_other_line_writes_the_waiting_run_lines_first(stream: Recording) -> None:
    run_line("INFO", "t1", "invoke bot@1 (stable) ok in 1 ms")
    logger.info("a state change")
    run_line("WARNING", "t2", "invoke bot@1 (stable) failed: model_error")
    run_line("INFO", "t3", "invoke bot@1 (stable) ok in 3 ms")
    # Written at once, in order: the waiting line, loguru's line, the failed run's line.
    assert [line.split(" | ", 1)[1] for line in stream.lines] == [
        "INFO    | t1 | invoke bot@1 (stable) ok in 1 ms",
        "INFO    | - | a state change",
        "WARNING | t2 | invoke bot@1 (stable) failed: model_error",
    ]
    restore_default_logging()  # removing the sink (as at exit) writes what still waits
    assert stream.lines[-1].endswith("| t3 | invoke bot@1 (stable) ok in 3 ms")


async def test_many_waiting_lines_are_written_without_waiting(stream: Recording) -> None:
    message = "x" * 1000
    lines = PENDING_LIMIT // 1000 + 1
    for index in range(lines):
        run_line("INFO", f"t{index}", message)
    # Written in one call as soon as they pass the limit; the rest wait for their time.
    assert len(stream.writes) == 1
    assert len(stream.writes[0]) >= PENDING_LIMIT and len(stream.lines) < lines


def test_off_an_event_loop_a_run_line_is_written_at_once(stream: Recording) -> None:
    run_line("INFO", "t1", "invoke bot@1 (stable) ok in 1 ms")
    assert len(stream.lines) == 1


def test_a_loop_that_ended_before_its_write_leaves_no_line_behind() -> None:
    recording = Recording()
    masked = MaskedStream(SecretMask(), recording)  # type: ignore[arg-type]

    async def ended_early() -> None:
        masked.write_soon("first\n")  # due on this loop, which ends first

    async def next_loop() -> None:
        masked.write_soon("second\n")  # due on this one now
        await asyncio.wait_for(recording.written.wait(), 5)

    asyncio.run(ended_early())
    assert recording.writes == []
    asyncio.run(next_loop())
    assert recording.lines == ["first", "second"]
