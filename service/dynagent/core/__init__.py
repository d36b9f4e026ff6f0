"""The service without HTTP: ``Service`` owns everything a running Dynagent has, and
``run_agent``/``stream_agent`` are the one run path every protocol calls.

The names are imported on first use (PEP 562), so that importing a module of this package
(``dynagent.core.auth`` for a command's API keys) does not build the whole service."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.core.routing import RunRequest
    from dynagent.core.runs import run_agent, stream_agent
    from dynagent.core.service import Service

_WHERE = {
    "RunRequest": "dynagent.core.routing",
    "run_agent": "dynagent.core.runs",
    "stream_agent": "dynagent.core.runs",
    "Service": "dynagent.core.service",
}
"""Each public name and the module it lives in."""

__all__ = ["RunRequest", "Service", "run_agent", "stream_agent"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'dynagent.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
