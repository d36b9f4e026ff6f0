"""Every async test on uvloop's event loop instead of asyncio's, the loop ``dynagent serve``
runs on with ``listen.event_loop: uvloop``::

    PYTHONPATH=. .venv/bin/pytest -p tests.support.uvloop_tests -m "not nacos and not slow"

The in-process tests then exercise the service's code on the loop an operator may choose.
On uvloop, all of them pass except the MCP result bound over HTTP: the MCP SDK's client
has no flow control and libuv reads a ready socket up to 32 times per loop turn, so it
buffers about 4.4 MB of an oversized result where the test allows 4 (why uvloop is not
the default; ``docs/configuration.md``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
import uvloop


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    return {"uvloop": uvloop.new_event_loop}
