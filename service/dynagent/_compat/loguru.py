"""loguru's internals: which sinks the logger writes to now.

loguru has no public way to list its sinks. The line each run ends with is written
straight to the service's one text sink (``dynagent.logs.run_line``) only while that
sink is the logger's only one: a sink added since (a test's, an embedding program's)
must see the line as a loguru record, so the line goes through loguru then.
"""

from __future__ import annotations

from typing import Any

from loguru import logger as _logger
from loguru._logger import context as _context

from dynagent._compat.versions import Tested

TESTED = Tested("loguru", "0.7.3", "0.8")
PRIVATE_PARTS = ("loguru:_logger.Core", "loguru:_logger.context")
"""What this module reaches, as ``module:attribute``: the logger's ``_core`` (a ``Core``),
whose ``handlers`` maps each sink's id to its handler, and ``context``, the context
variable holding what ``logger.contextualize`` added to each record's ``extra``."""


def check() -> None:
    TESTED.check()


def only_sink(sink_id: int) -> bool:
    """Whether the sink ``sink_id`` (as ``logger.add`` returned it) is the only one the
    logger writes to now. Asked for every run's line: one attribute read and two dict
    operations."""
    handlers: dict[int, object] = _logger._core.handlers  # type: ignore[attr-defined]
    return len(handlers) == 1 and sink_id in handlers


class contextualized:
    """``logger.contextualize(**extra)`` as a class: the same context variable set and
    reset, without a generator and the logger's lock (a context variable is the running
    task's own). Every run enters one."""

    __slots__ = ("_extra", "_token")

    def __init__(self, **extra: Any) -> None:
        self._extra = extra

    def __enter__(self) -> None:
        self._token = _context.set({**_context.get(), **self._extra})

    def __exit__(self, *exc: object) -> None:
        _context.reset(self._token)
