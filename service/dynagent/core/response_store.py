"""Responses kept for ``GET /v1/responses/{id}`` and ``previous_response_id``: the
last ``max_responses`` of this process, in memory, each readable only with the API
key that created it. Replicas do not share them (pin a conversation to one, or
carry it yourself with ``input`` items)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dynagent.exceptions import ResponseNotFound
from dynagent.models.base import Message

MAX_RESPONSES = 1000


@dataclass(frozen=True, slots=True)
class StoredResponse:
    body: dict[str, Any]
    """The response object as it was answered."""
    messages: tuple[Message, ...]
    """The conversation up to and including this response, as chat messages."""
    owner: str
    """Digest of the API key that created it."""


class ResponseStore:
    def __init__(self, max_responses: int = MAX_RESPONSES) -> None:
        self._kept: OrderedDict[str, StoredResponse] = OrderedDict()
        self._max = max_responses

    def put(self, stored: StoredResponse) -> None:
        self._kept[stored.body["id"]] = stored
        while len(self._kept) > self._max:
            self._kept.popitem(last=False)

    def get(self, response_id: str, owner: str) -> StoredResponse:
        stored = self._kept.get(response_id)
        if stored is None or stored.owner != owner:
            raise ResponseNotFound(
                f"no stored response {response_id!r}; only the last {self._max} "
                "responses created with store: true by this API key are kept"
            )
        return stored
