"""``pii_redaction``: mask e-mail addresses, phone numbers and ID numbers.

Masks what the model is sent (user input and tool results alike) and every
text that reaches traces and logs.
"""

from __future__ import annotations

import asyncio
import dataclasses

from pydantic import BaseModel, ConfigDict

from .. import _regex
from .._redaction import INLINE_CHARS
from ..models.base import Message, ModelRequest
from .base import Interceptor, RunContext

# RE2 (linear time, see ``_regex``), applied in this order. RE2 has no lookbehind, so
# PHONE's "not after a word character" is a captured prefix that the mask keeps.
_EMAIL = _regex.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# Chinese resident ID (18), US SSN, then long digit runs such as card numbers.
_ID = _regex.compile(r"\b\d{17}[\dXx]\b|\b\d{3}-\d{2}-\d{4}\b|\b(?:\d[ -]?){13,19}\b")
_PHONE = _regex.compile(r"(^|[^\w])(\+?\d[\d\s().-]{6,}\d)")
PATTERNS = {"EMAIL": _EMAIL, "ID": _ID, "PHONE": _PHONE}
"""Every pattern ``redact`` applies, by the kind it masks (the benchmark runs each)."""


class PiiConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mask: str = "[{kind}]"
    """Replacement text; ``{kind}`` becomes EMAIL, PHONE or ID."""


def redact(text: str, mask: str = "[{kind}]") -> str:
    """``text`` with every e-mail address, ID and phone number replaced by ``mask``."""
    text = _EMAIL.replace(text, mask.replace("{kind}", "EMAIL"))
    text = _ID.replace(text, mask.replace("{kind}", "ID"))
    return _PHONE.replace(text, mask.replace("{kind}", "PHONE"), keep=1)


class PiiRedaction(Interceptor):
    name = "pii_redaction"

    def __init__(self, config: PiiConfig) -> None:
        self.mask = config.mask

    def _redact(self, text: str) -> str:
        return redact(text, self.mask)

    async def before_run(self, ctx: RunContext) -> None:
        ctx.redactors.append(self._redact)

    async def before_model(self, ctx: RunContext, request: ModelRequest) -> ModelRequest:
        # Big texts are masked on a worker thread, once per run: the history is sent
        # again at every step, and the event loop is never held by one long text.
        messages = [await self._message(m, ctx.pii_masked) for m in request.messages]
        return dataclasses.replace(request, messages=tuple(messages))

    async def _text(self, text: str, done: dict[str, str]) -> str:
        if len(text) <= INLINE_CHARS:
            return self._redact(text)
        if text not in done:
            done[text] = await asyncio.to_thread(self._redact, text)
        return done[text]

    async def _message(self, message: Message, done: dict[str, str]) -> Message:
        content = message.get("content")
        if isinstance(content, str):
            return {**message, "content": await self._text(content, done)}
        if isinstance(content, list):
            parts = [
                {**p, "text": await self._text(p["text"], done)}
                if isinstance(p.get("text"), str)
                else p
                for p in content
                if isinstance(p, dict)
            ]
            return {**message, "content": parts}
        return message
