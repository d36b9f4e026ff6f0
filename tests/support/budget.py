"""How hard the fuzz tests try: a bounded budget by default, far more with ``--long``
(or ``DYNAGENT_FUZZ=long``), e.g. ``pytest tests/fuzz tests/security --long``."""

from __future__ import annotations

import os

import pytest

LONG_ENV = "DYNAGENT_FUZZ"
LONG_TIMEOUT = 3600
"""Seconds a ``fuzz``-marked test may take in a long run (120 otherwise, as every test)."""


def is_long(config: pytest.Config) -> bool:
    return bool(config.getoption("--long", default=False)) or os.environ.get(LONG_ENV) == "long"


def budget(config: pytest.Config, default: int, long: int) -> int:
    """``default`` examples in the ordinary run, ``long`` in a long one."""
    return long if is_long(config) else default
