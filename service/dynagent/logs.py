"""Logging with loguru: text or JSON lines, a trace id on every run's lines, and
secrets masked before anything is written."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from loguru import logger

if TYPE_CHECKING:
    from loguru import Record

TEXT_FORMAT = (
    "<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <7}</level> | "
    "{extra[trace_id]} | {message}"
)
MASK = "***"


class SecretMask:
    """Replaces known secret values (API keys, passwords) in every log record."""

    def __init__(self) -> None:
        self._secrets: set[str] = set()

    def add(self, secrets: Iterable[str]) -> None:
        # Short values would mask ordinary words; real keys are long.
        self._secrets.update(s for s in secrets if s and len(s) >= 6)

    def __call__(self, record: Record) -> None:
        record["extra"].setdefault("trace_id", "-")
        if not self._secrets:
            return
        message = record["message"]
        for secret in self._secrets:
            if secret in message:
                message = message.replace(secret, MASK)
        record["message"] = message


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
