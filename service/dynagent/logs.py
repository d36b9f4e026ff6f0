"""Logging with loguru: text or JSON lines, a trace id on every run's lines, and
secrets masked before anything is written."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from loguru import logger

from .masking import MASK, SecretValues

if TYPE_CHECKING:
    from loguru import Record

__all__ = ["MASK", "SecretMask", "configure_logging"]

TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <7}</level> | "
    "{extra[trace_id]} | {message}"
)


class SecretMask(SecretValues):
    """Replaces known secret values (API keys, passwords) in every log record; the
    service hands the same set to the app, which adds what it learns later."""

    def __call__(self, record: Record) -> None:
        record["extra"].setdefault("trace_id", "-")
        if len(self):
            record["message"] = self.mask(record["message"])


def configure_logging(level: str = "INFO", *, json_lines: bool = False) -> SecretMask:
    """Send logs to stderr; returns the mask so secrets can be registered with it."""
    mask = SecretMask()
    logger.remove()
    logger.configure(patcher=mask, extra={"trace_id": "-"})
    if json_lines:
        logger.add(sys.stderr, level=level.upper(), serialize=True, backtrace=False, diagnose=False)
    else:
        logger.add(
            sys.stderr, level=level.upper(), format=TEXT_FORMAT, backtrace=False, diagnose=False
        )
    return mask
