"""A model that falls back to a second one when the first fails after its retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

from loguru import logger

from ..exceptions import ModelError
from .base import Model, ModelRequest, ModelResponse, StreamItem


@dataclass(frozen=True, slots=True)
class FallbackModel:
    primary: Model
    fallback: Model

    @property
    def name(self) -> str:
        return self.primary.name

    async def request(self, request: ModelRequest) -> ModelResponse:
        try:
            return await self.primary.request(request)
        except ModelError as exc:
            logger.warning(
                "model {} failed ({}); falling back to {}",
                self.primary.name,
                exc,
                self.fallback.name,
            )
            return await self.fallback.request(request)

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        started = False
        try:
            async for item in self.primary.stream(request):
                started = True
                yield item
            return
        except ModelError as exc:
            if started:
                raise  # text already reached the caller; switching models would splice two answers
            logger.warning(
                "model {} failed ({}); falling back to {}",
                self.primary.name,
                exc,
                self.fallback.name,
            )
        async for item in self.fallback.stream(request):
            yield item
