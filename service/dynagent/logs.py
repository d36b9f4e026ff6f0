"""Logging with loguru: text or JSON lines, a trace id on every run's lines, and
secrets masked before anything is written.

Every log line of the process goes through one loguru sink that masks: loguru's own
records, and every stdlib ``logging`` record (aiohttp's ``aiohttp.server`` and
``aiohttp.access``, the Nacos SDK, asyncio …) bridged into it by ``StdlibBridge``. A
stdlib warning or error that repeats one already shown is held back (see
``RepeatGate``): 40 s of Nacos outage is one line, not 38.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TextIO

from loguru import logger

from dynagent import _regex
from dynagent._compat import loguru as loguru_compat
from dynagent.masking import MASK, SecretValues

if TYPE_CHECKING:
    from loguru import Record

__all__ = [
    "MASK",
    "SecretMask",
    "StdlibBridge",
    "configure_logging",
    "run_line",
    "state_changed",
]

TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <7}</level> | "
    "{extra[trace_id]} | {message}"
)
_DIGITS = _regex.compile(r"\d+")
REPEAT_WINDOW = 300.0
"""Seconds a repeated stdlib warning stays held back before it is shown again."""
FLUSH_AFTER = 0.05
"""Seconds a run's line may wait to be written with the others of that time: the one line
every request logs cost about 3 % of serving one in its own system call."""
PENDING_LIMIT = 1 << 16
"""Characters of run lines that are written at once, however recent."""


class SecretMask(SecretValues):
    """Replaces known secret values (API keys, passwords) in every log record; the
    service hands the same set to the app, which adds what it learns later."""

    def __call__(self, record: Record) -> None:
        record["extra"].setdefault("trace_id", "-")
        if len(self):
            record["message"] = self.mask(record["message"])


class MaskedStream:
    """The one sink's stream: the whole formatted line (exception text included) is
    masked again just before it is written. One writer at a time: loguru's handler
    writes under its own lock, a run's line (``run_line``) without it, and threads
    (the Nacos SDK's, the stdlib bridge's) log too.

    A run's line may wait up to ``FLUSH_AFTER`` seconds to be written with the others of
    that time, in one system call (``write_soon``); any other line, a flush, the sink's
    removal (at exit too: loguru removes its sinks then) or ``PENDING_LIMIT`` characters
    write what waits first, so lines keep their order."""

    def __init__(self, mask: SecretMask, stream: TextIO) -> None:
        self._mask = mask
        self._stream = stream
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._pending_chars = 0
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        """The loop that will write what waits (None: no write is due)."""

    def write(self, text: str) -> None:
        masked = self._mask.mask(text)
        with self._lock:
            self._write_pending()
            self._stream.write(masked)

    def write_soon(self, text: str) -> None:
        """Write ``text`` within ``FLUSH_AFTER`` seconds (at once off an event loop)."""
        masked = self._mask.mask(text)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._pending.append(masked)
            self._pending_chars += len(masked)
            if loop is None or self._pending_chars >= PENDING_LIMIT:
                self._write_pending()
                self._stream.flush()
            elif self._timer_loop is not loop:  # none due, or due on a loop now gone
                self._timer_loop = loop
                loop.call_later(FLUSH_AFTER, self._due)

    def _due(self) -> None:
        with self._lock:
            self._timer_loop = None
        self.flush()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()
            self._stream.flush()

    def stop(self) -> None:
        """Loguru removes the sink: nothing that waits is lost."""
        self.flush()

    def _write_pending(self) -> None:
        if self._pending:
            self._stream.write("".join(self._pending))
            self._pending.clear()
            self._pending_chars = 0

    def isatty(self) -> bool:
        return self._stream.isatty()


class RepeatGate:
    """Holds back a stdlib warning/error already shown for its logger family, until that
    family logs something below WARNING (a state change, such as a reconnect) or
    ``REPEAT_WINDOW`` seconds pass; the next line shown says how many were held."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._shown: dict[str, dict[str, float]] = {}
        self._held: dict[str, int] = {}

    def reset(self) -> None:
        self._shown.clear()

    def admit(self, name: str, level: int, message: str) -> tuple[bool, int]:
        """(show it?, how many lines of this family were held back before it)."""
        family = name.split(".", maxsplit=1)[0]
        shown = self._shown.setdefault(family, {})
        if level < logging.WARNING:
            shown.clear()
            return True, self._held.pop(family, 0)
        key = _DIGITS.sub("#", message[:300])  # "retry 3 of 10" repeats "retry 2 of 10"
        now = self._clock()
        if now - shown.get(key, -REPEAT_WINDOW) < REPEAT_WINDOW:
            self._held[family] = self._held.get(family, 0) + 1
            return False, 0
        shown[key] = now
        return True, self._held.pop(family, 0)


class StdlibBridge(logging.Handler):
    """Hands every stdlib ``logging`` record to loguru, as one masked line."""

    def __init__(self, gate: RepeatGate | None = None) -> None:
        super().__init__()
        self.gate = gate or RepeatGate()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = f"{record.name}: {record.getMessage()}"
            if record.exc_info and record.exc_info[1] is not None:
                text += f": {_exception_text(record.exc_info)}"
        except Exception:
            self.handleError(record)
            return
        show, held = self.gate.admit(record.name, record.levelno, text)
        if not show:
            return
        if held:
            text += f" ({held} repeated line(s) held back before this)"
        level: str | int = record.levelno
        if record.levelname in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            level = record.levelname
        logger.log(level, "{}", text)


def _exception_text(exc_info: Any) -> str:
    error = exc_info[1]
    # aiohttp's refusal of a malformed request is the client's fault: one line, no traceback.
    if type(error).__module__.startswith("aiohttp.http_exceptions"):
        return f"{type(error).__name__}: {' '.join(str(error).split())}"
    return logging.Formatter().formatException(exc_info)


def route_stdlib_logging(level: str) -> None:
    """Send every stdlib logger's records through loguru (idempotent)."""
    # The root logger's level stays as it is (WARNING by default): libraries' INFO chatter
    # (aiohttp.access per request) is not wanted, and records made are records kept by
    # any other handler (pytest's capture grew by one per request).
    root = logging.getLogger()
    if not any(isinstance(h, StdlibBridge) for h in root.handlers):
        root.addHandler(StdlibBridge())
    for handler in root.handlers:
        if isinstance(handler, StdlibBridge):
            handler.setLevel(level.upper())


def stdlib_routed() -> bool:
    """Whether stdlib records reach the masking sink (``dynagent serve`` set it up)."""
    return any(isinstance(h, StdlibBridge) for h in logging.getLogger().handlers)


def state_changed() -> None:
    """A connection's state changed (a source is reachable again, or lost): warnings
    held back as repeats may each show once more."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, StdlibBridge):
            handler.gate.reset()


class _TextSink:
    """The service's text sink, written to without a loguru record: the line each run
    ends with is the one line every request logs, and loguru's record (the caller's
    frame, thread, process, a time zone-aware time, the format's fields) cost about a
    tenth of serving a whole request. The line written is the one loguru would write."""

    def __init__(self, stream: MaskedStream, sink_id: int, level: str) -> None:
        self.stream = stream
        self.sink_id = sink_id
        self.levels = {name: logger.level(name).no for name in ("INFO", "WARNING")}
        self.least = logger.level(level.upper()).no
        self.second = -1
        self.stamp = ""

    def alone(self) -> bool:
        """Whether it is still the logger's only sink (no other sink misses the line)."""
        return loguru_compat.only_sink(self.sink_id)

    def write(self, level: str, trace_id: str, message: str) -> None:
        if self.levels[level] < self.least:
            return
        now = time.time()
        second = int(now)
        if second != self.second:  # the date and time to the second, made once a second
            self.second = second
            self.stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
        millis = int((now - second) * 1000)
        line = f"{self.stamp}.{millis:03d} | {level: <7} | {trace_id} | {message}\n"
        if level == "INFO":
            self.stream.write_soon(line)
        else:  # a failed run's line is not held back
            self.stream.write(line)
            self.stream.flush()


class _Sinks:
    text: _TextSink | None = None
    """Set by ``configure_logging`` when it writes uncoloured text lines: loguru's own
    configuration is the process's, and so is this."""


def run_line(level: Literal["INFO", "WARNING"], trace_id: str, message: str) -> None:
    """Log the line a run ends with: as loguru would, with ``trace_id`` and masked, but
    straight to the service's text sink while that is the only one."""
    text = _Sinks.text
    if text is not None and text.alone():
        text.write(level, trace_id, message)
    else:
        logger.bind(trace_id=trace_id).log(level, "{}", message)


def configure_logging(level: str = "INFO", *, json_lines: bool = False) -> SecretMask:
    """Send logs to stderr; returns the mask so secrets can be registered with it."""
    mask = SecretMask()
    logger.remove()
    _Sinks.text = None
    logger.configure(patcher=mask, extra={"trace_id": "-"})
    stream = MaskedStream(mask, sys.stderr)
    if json_lines:
        logger.add(stream, level=level.upper(), serialize=True, backtrace=False, diagnose=False)
    else:
        sink = logger.add(
            stream, level=level.upper(), format=TEXT_FORMAT, backtrace=False, diagnose=False
        )
        if not stream.isatty():  # coloured lines are loguru's to write
            _Sinks.text = _TextSink(stream, sink, level)
    route_stdlib_logging(level)
    return mask
