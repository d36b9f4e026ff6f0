"""The answer text of a run, as both OpenAI routes send it, streamed or not.

The rule is the run's own (``FinalOutput``: every text of the turn, joined by a blank
line; with an output schema the validated JSON alone, sent whole once validated). A
streamed answer concatenates to exactly the non-streamed one, because both are folded
from the run's events by this one class (deltas when streamed, whole responses when not).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from dynagent.events import (
    STEP_SEPARATOR,
    Event,
    FinalOutput,
    ModelDelta,
    ModelRequestEvent,
    ModelResponseEvent,
)


class AnswerText:
    """Folds events into answer text; ``feed`` returns what to send now."""

    def __init__(self, structured: bool, client_names: frozenset[str]) -> None:
        self.structured = structured
        self.client_names = client_names
        self.last: ModelResponseEvent | None = None
        """The latest model response: its client tool calls end the turn."""
        self._wrote = False
        self._in_step = False
        self._streamed = False

    def feed(self, event: Event) -> str:
        if isinstance(event, ModelResponseEvent):
            self.last = event
            if not (self._streamed or self.structured):
                return self._piece(event.content or "")
        elif isinstance(event, ModelDelta):
            self._streamed = True
            if not self.structured:
                return self._piece(event.text)
        elif isinstance(event, ModelRequestEvent):
            self._in_step = self._streamed = False
        elif isinstance(event, FinalOutput) and self.structured:
            if self.client_calls():
                return event.output or ""
            return json.dumps(event.output, ensure_ascii=False)
        return ""

    def text(self, events: Iterable[Event]) -> str:
        return "".join(map(self.feed, events))

    def client_calls(self) -> list[dict[str, str]]:
        """The calls of client tools that ended the turn (empty when it ended with text)."""
        if self.last is None:
            return []
        return [call for call in self.last.tool_calls if call["name"] in self.client_names]

    def _piece(self, text: str) -> str:
        if not text:
            return ""
        prefix = STEP_SEPARATOR if self._wrote and not self._in_step else ""
        self._wrote = self._in_step = True
        return prefix + text
