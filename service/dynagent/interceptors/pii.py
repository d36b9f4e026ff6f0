"""``pii_redaction``: mask e-mail addresses, phone numbers and ID numbers.

Masks what the model is sent (user input and tool results alike) and every
text that reaches traces and logs.
"""

from __future__ import annotations

import dataclasses
import re

from pydantic import BaseModel, ConfigDict

from ..models.base import Message, ModelRequest
from .base import Interceptor, RunContext

_PATTERNS = (
    ("EMAIL", re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")),
    # Chinese resident ID (18), US SSN, then long digit runs such as card numbers.
    ("ID", re.compile(r"\b\d{17}[\dXx]\b|\b\d{3}-\d{2}-\d{4}\b|\b(?:\d[ -]?){13,19}\b")),
    ("PHONE", re.compile(r"(?<![\w])\+?\d[\d\s().-]{6,}\d(?![\w])")),
)


class PiiConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mask: str = "[{kind}]"
    """Replacement text; ``{kind}`` becomes EMAIL, PHONE or ID."""


def redact(text: str, mask: str = "[{kind}]") -> str:
    for kind, pattern in _PATTERNS:
        text = pattern.sub(mask.replace("{kind}", kind), text)
    return text


class PiiRedaction(Interceptor):
    name = "pii_redaction"

    def __init__(self, config: PiiConfig) -> None:
        self.mask = config.mask

    def _redact(self, text: str) -> str:
        return redact(text, self.mask)

    async def before_run(self, ctx: RunContext) -> None:
        ctx.redactors.append(self._redact)

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        return dataclasses.replace(
            request, messages=tuple(self._message(m) for m in request.messages)
        )

    def _message(self, message: Message) -> Message:
        content = message.get("content")
        if isinstance(content, str):
            return {**message, "content": self._redact(content)}
        if isinstance(content, list):
            parts = [
                {**p, "text": self._redact(p["text"])} if isinstance(p.get("text"), str) else p
                for p in content
                if isinstance(p, dict)
            ]
            return {**message, "content": parts}
        return message
