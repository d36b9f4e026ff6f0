"""Sending a notice once per fleet: every replica sees the same registry change, and the
one whose ``SET NX`` of the notice's delivery id wins in the fleet's Redis sends it."""

from __future__ import annotations

from typing import Any

CLAIM_SECONDS = 24 * 3600
"""How long a delivery id stays claimed: far longer than any replica lags behind."""


class RedisClaims:
    """Claims in the Redis at ``url`` (the fleet's session store), under ``prefix``."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._client: Any = None

    async def __call__(self, delivery: str) -> bool:
        if self._client is None:
            import redis.asyncio as redis  # the redis extra: only a fleet needs it

            self._client = redis.from_url(self.url, socket_timeout=2.0)
        key = f"{self.prefix}webhook:{delivery}"
        return bool(await self._client.set(key, "1", nx=True, ex=CLAIM_SECONDS))

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
