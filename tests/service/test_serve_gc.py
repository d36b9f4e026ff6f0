"""What ``dynagent serve`` does to the garbage collector once it serves: startup's objects
frozen out of it, and the youngest generation collected at ``YOUNG_COLLECTION_AT``."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest
from loguru import logger

from dynagent.cli import serve


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector as the test found it, put back afterwards."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


async def _started() -> None:
    serve._serving("127.0.0.1", 8090)


def test_started_service_freezes_startup_and_collects_the_young_less_often(
    collector: None,
) -> None:
    before = gc.get_threshold()
    gc.unfreeze()
    sink = logger.add(lambda _: None)  # its "listening on" line goes nowhere
    try:
        asyncio.run(_started())
    finally:
        logger.remove(sink)
    assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (serve.YOUNG_COLLECTION_AT, *before[1:])
    assert before[0] < serve.YOUNG_COLLECTION_AT
