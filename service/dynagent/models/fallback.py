"""A model that falls back to a second one when the first fails after its retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from loguru import logger

from dynagent.exceptions import CircuitOpen, ModelError
from dynagent.models.base import Model, ModelRequest, ModelResponse, StreamItem
from dynagent.models.prices import priced_name


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
            self._falling_back(exc)
            return self._priced(await self.fallback.request(request))

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
            self._falling_back(exc)
        async for item in self.fallback.stream(request):
            yield self._priced(item) if isinstance(item, ModelResponse) else item

    def _priced(self, response: ModelResponse) -> ModelResponse:
        """The fallback's answer, priced as the fallback (``models.prices``)."""
        return replace(response, priced_as=response.priced_as or priced_name(self.fallback))

    def _falling_back(self, error: ModelError) -> None:
        # While the primary's circuit is open every request falls back; the breaker
        # already warned once, so one warning per request would only flood the log.
        log = logger.debug if isinstance(error, CircuitOpen) else logger.warning
        primary, fallback = self.primary.name, self.fallback.name
        log("model {} failed ({}); falling back to {}", primary, error, fallback)


def priced_names(model: Model) -> tuple[str, ...]:
    """The names of every model ``model`` may call, as ``models.prices`` lists them."""
    if isinstance(model, FallbackModel):
        return (*priced_names(model.primary), *priced_names(model.fallback))
    return (priced_name(model),)
