"""Model calls cut off before they answered never report their tokens, yet the endpoint
has read the prompt (and written part of an answer): what a run counts them at is an
estimate from the size of what the model was sent (``events.estimated_usage``).

A call the run itself cut off (its time up, its caller gone) is counted by the run
(``runtime._calls``). An attempt the model client cut off at its whole-answer deadline
(``model.timeout``) and then retried, or failed on, is counted here: the client notes it
in the run's ``CUT_ATTEMPTS``, and the run counts them with the call they were attempts of
(its cost ceiling holds to both), or as it closes when that call failed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextvars import ContextVar

from dynagent.events import Usage, estimated_usage, text_size
from dynagent.models.base import Message, ModelRequest, ToolDefinition

CUT_ATTEMPTS: ContextVar[list[tuple[str, Usage]] | None] = ContextVar(
    "dynagent_cut_attempts", default=None
)
"""The run's attempts cut off at their deadline so far: ``(model name, usage)``."""


def tools_size(tools: Sequence[ToolDefinition]) -> int:
    """What tool definitions add to each call's prompt size: their names, descriptions and
    argument schemas as JSON."""
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)


MEDIA_CHARS = 4 * 765
"""What a part of a message that is not text (an image, audio, a file) counts as: the
tokens of a 1024x1024 image in high detail, as OpenAI prices it, at four characters a
token. Its own characters (a data URL's base64, a link) say nothing of its tokens: a 1 MB
image would count as 250,000 tokens."""

_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})
"""The ``type`` of a message part that is text (chat completions' and Responses')."""


def prompt_size(messages: Sequence[Message], tools: int = 0) -> int:
    """Characters of text of a call sent ``messages`` and tool definitions of ``tools``
    characters (``tools_size``): ``model_request``'s ``prompt_chars``. A message's text
    parts count their text, its other parts ``MEDIA_CHARS`` each."""
    total = tools
    for message in messages:
        if not isinstance(message, dict):
            total += text_size(message)
            continue
        for key, value in message.items():
            if type(value) is str:
                total += len(value)
            elif key == "content" and isinstance(value, list):
                total += sum(_part_size(part) for part in value)
            else:
                total += text_size(value)
    return total


def _part_size(part: object) -> int:
    if isinstance(part, dict):
        kind = part.get("type")
        return (
            text_size(part.get("text"))
            if type(kind) is str and kind in _TEXT_PARTS
            else MEDIA_CHARS
        )
    return text_size(part)


def note_cut_attempt(model: str, request: ModelRequest) -> None:
    """An attempt of ``request`` to ``model`` cut off before it answered: counted in the
    run it is part of, if any."""
    attempts = CUT_ATTEMPTS.get()
    if attempts is not None:
        size = prompt_size(request.messages, tools_size(request.tools))
        attempts.append((model, estimated_usage(size, 0)))
