"""What the loop hands off: tool calls run together, arguments parsed and answers checked
off the event loop when long, and a tool's error as the model reads it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from dynagent.interceptors.base import ToolOutcome
from dynagent.runtime._redaction import INLINE_CHARS
from dynagent.tools.base import Tool

_T = TypeVar("_T")


async def all_or_none(calls: list[Coroutine[Any, Any, ToolOutcome]]) -> list[ToolOutcome]:
    """Like ``gather``, but one failure cancels the calls still running: a run that
    has ended must not leave tools working in the background."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def parsed_arguments(tool: Tool, text: str) -> tuple[Any, str | None]:
    arguments = json.loads(text or "{}")
    return arguments, tool.argument_errors(arguments)


async def off_loop(check: Callable[..., _T], *args: Any) -> _T:
    """``check(*args)``, on a worker thread when its text is long: parsing and
    validating a 1 MB answer must not hold the event loop."""
    if len(args[-1]) <= INLINE_CHARS:
        return check(*args)
    return await asyncio.to_thread(check, *args)


def tool_error(text: str) -> ToolOutcome:
    return ToolOutcome(f"TOOL_ERROR: {text}", is_error=True)
