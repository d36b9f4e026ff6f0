"""Fixtures for the reliability tests: a folder of agent files, a place for state, and
the service serving them in process."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.service import (
    Document,
    RunningService,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

SOAK = os.environ.get("DYNAGENT_SOAK", "") not in ("", "0")
"""``DYNAGENT_SOAK=1``: the long runs (more requests, runs and churn); off by default."""

Serve = Callable[..., AbstractAsyncContextManager[RunningService]]


@pytest.fixture
def serve(agents_dir: Path, state_dir: Path) -> Serve:
    """``serve(*documents, **config_sections)``: the service in process, serving them."""

    @asynccontextmanager
    async def start(*documents: Document, **sections: Any) -> AsyncIterator[RunningService]:
        for document in documents:
            write_agent(agents_dir, document)
        async with running_service(service_config(agents_dir, state_dir, **sections)) as service:
            for document in documents:
                await service.wait_serving(document["name"], revision_of(document))
            yield service

    return start
