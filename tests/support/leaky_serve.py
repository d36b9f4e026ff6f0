"""``python -m tests.support.leaky_serve serve …``: ``dynagent serve`` whose built-in
``calculator`` leaks on purpose: each call keeps 64 kB of memory, every fourth an open
file descriptor, for good. The soak's leak test runs it: the soak's detector must catch it."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from dynagent.cli import main
from dynagent.tools import builtins, registry
from dynagent.tools.base import Tool

KEPT: list[Any] = []


def leaky(calculator: Tool) -> Tool:
    honest = calculator.function

    async def calculate(arguments: dict[str, Any]) -> str:
        KEPT.append(bytearray(64 * 1024))
        if len(KEPT) % 4 == 0:
            KEPT.append(os.open(os.devnull, os.O_RDONLY))
        return await honest(arguments)

    return dataclasses.replace(calculator, function=calculate)


if __name__ == "__main__":
    # What ToolRegistry.default() registers, as the registry module imported it.
    registry.BUILTIN_TOOLS = (  # type: ignore[attr-defined]
        leaky(builtins.CALCULATOR),
        builtins.CURRENT_TIME,
    )
    sys.exit(main())
