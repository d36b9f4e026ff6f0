"""Deleted dataIds still served for a grace period, each by the task that removes it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from loguru import logger


class DeleteGrace:
    """One removal task per deleted dataId, cancelled when the dataId comes back."""

    def __init__(self, seconds: float, location: str) -> None:
        self.seconds = seconds
        self.location = location
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, data_id: str, remove: Callable[[], Awaitable[None]]) -> None:
        """Call ``remove`` after the grace, unless a removal of ``data_id`` is pending."""
        if data_id in self.tasks:
            return

        async def later() -> None:
            await asyncio.sleep(self.seconds)
            self.tasks.pop(data_id, None)
            await remove()

        logger.info(
            "{}/{} deleted in Nacos; still served for {:g} s", self.location, data_id, self.seconds
        )
        self.tasks[data_id] = asyncio.create_task(later(), name=f"nacos-delete {data_id}")

    def cancel(self, data_id: str) -> None:
        """``data_id`` came back within the grace: it stays."""
        pending = self.tasks.pop(data_id, None)
        if pending is not None:
            pending.cancel()
