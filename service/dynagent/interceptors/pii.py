"""``pii_redaction``: mask e-mail addresses, phone numbers and ID numbers.

Masks what the model is sent (user input and tool results alike) and every
text that reaches traces and logs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

from pydantic import BaseModel, ConfigDict

from dynagent import _regex
from dynagent.interceptors.base import Interceptor, RunContext
from dynagent.models.base import Message, ModelRequest
from dynagent.runtime._redaction import INLINE_CHARS

# RE2 (linear time, see ``_regex``), applied in this order. RE2 has no lookbehind, so
# PHONE's "not after a word character" is a captured prefix that the mask keeps.
_EMAIL = _regex.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}")
# Chinese resident ID (18), US SSN, then card numbers: 13-19 digits, or written in groups
# of four (the last group shorter), or as American Express writes them (4-6-5). A loose
# "13 digits with any separators" took a date and the number after it for an ID.
_ID = _regex.compile(
    r"\b\d{17}[\dXx]\b|\b\d{3}-\d{2}-\d{4}\b|\b\d{13,19}\b"
    r"|\b\d{4}(?: \d{4}){2} \d{1,7}\b|\b\d{4}(?:-\d{4}){2}-\d{1,7}\b"
    r"|\b\d{4} \d{6} \d{5}\b|\b\d{4}-\d{6}-\d{5}\b"
)
_PHONE = _regex.compile(
    r"(^|[^\w+])("
    r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?){1,5}[ .-]?\d{2,8}"  # +1 415 555 0100, +33 1 23 45 67 89
    r"|\(\d{2,4}\)[ .-]?\d{3,4}[ .-]\d{3,8}"  # (415) 555-2671
    r"|\d{2,4}[ .-]\d{3,4}[ .-]\d{3,8}"  # 415 555 2671, 020 7946 0958, 415.555.2671
    r"|\d{3,4}-\d{3,8}"  # 555-1234, 010-12345678
    r"|1[3-9]\d{9}"  # a mainland China mobile number
    r")"
)
"""The shapes a phone number is written in; ``phone_spans`` then refuses what only looks
like one (part of a date, a time, an IP address, a version or an order number)."""
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
    spans = phone_spans(text)
    if not spans:
        return text
    phone, end = mask.replace("{kind}", "PHONE"), 0
    pieces: list[str] = []
    for start, stop in spans:
        pieces += (text[end:start], phone)
        end = stop
    pieces.append(text[end:])
    return "".join(pieces)


def phone_spans(text: str) -> list[tuple[int, int]]:
    """Where ``text`` holds phone numbers, as (start, end) offsets.

    Each shape ``_PHONE`` finds is checked (``_is_phone``). A refused shape may hide a
    number that starts inside it (``2026-12-04 555-1234``): the few characters from there
    are searched again. Shapes are at most ``_LONGEST`` characters, so the work is linear."""
    spans: list[tuple[int, int]] = []
    done = 0
    for start, end in _PHONE.spans(text, 2):
        if start < done:
            continue
        found = _checked(text, start, end) or _inside(text, start, end)
        if found is not None:
            spans.append(found)
            done = found[1]
    return spans


_LONGEST = 64
"""More than the longest shape ``_PHONE`` matches."""


def _inside(text: str, start: int, end: int) -> tuple[int, int] | None:
    # From the refused shape's second character: a shape found right at the window's
    # start is checked against the text before it like any other (``_glued``).
    window = text[start + 1 : min(len(text), end + _LONGEST)]
    for first, last in _PHONE.spans(window, 2):
        found = _checked(text, start + 1 + first, start + 1 + last)
        if found is not None:
            return found
    return None


def _checked(text: str, start: int, end: int) -> tuple[int, int] | None:
    if start and text[start - 1] == "(" and text.find(")", start, end) > 0:
        start -= 1  # "(415) 555-2671" after a word: the bracket is part of it
    return (start, end) if _is_phone(text, start, end) else None


_MIN_DIGITS = 7
_GLUE = frozenset("-_/#.:")
"""Characters that join a number to a word into one identifier (``ORD-2024-000123``)."""


def _is_phone(text: str, start: int, end: int) -> bool:
    candidate = text[start:end].rstrip(".")
    end = start + len(candidate)
    if _glued(text, start, end, plus=candidate.startswith("+")):
        return False
    return _phone_shape(candidate)


@functools.lru_cache(maxsize=4096)
def _phone_shape(candidate: str) -> bool:
    """Whether a run (at most ``_LONGEST`` characters) is written as a phone number. Cached:
    a text repeats the same few shapes, and this is most of the per-shape work."""
    if not candidate[-1:].isdigit():
        return False
    if len(parts := candidate.split()) > 1 and any(_is_date(part) for part in parts):
        return False  # "2026-12-04 555-1234": a date, then a number
    groups = _digit_runs(candidate)
    if not _MIN_DIGITS <= sum(map(len, groups)) <= 15:
        return False
    return candidate.startswith("+") or _national(candidate, groups)


def _national(candidate: str, groups: list[str]) -> bool:
    """A number written without a country code: separated into groups of at most four
    digits (the last of three to eight), or a mainland China mobile number."""
    if len(groups) == 1:  # no separator: a mainland China mobile number, or just a number
        return len(candidate) == 11 and candidate[0] == "1" and candidate[1] in "3456789"
    if _date_or_address(groups, _separators(candidate)):
        return False
    return all(len(g) <= 4 for g in groups[:-1]) and 3 <= len(groups[-1]) <= 8


_NOT_DIGITS = {code: " " for code in range(0x80) if not chr(code).isdigit()}


def _digit_runs(candidate: str) -> list[str]:
    """The runs of ASCII digits (the candidate pattern admits no other characters)."""
    return candidate.translate(_NOT_DIGITS).split()


def _is_date(token: str) -> bool:
    if not 6 <= len(token) <= 10 or ("-" not in token and "." not in token):
        return False  # the quick no: "555", "(415)", "4567"
    return _date_or_address(_digit_runs(token), _separators(token))


_DIGITS = {ord(d): None for d in "0123456789"}


def _separators(candidate: str) -> set[str]:
    return set(candidate.translate(_DIGITS)) - {"(", ")", " "}


def _date_or_address(groups: list[str], separators: set[str]) -> bool:
    """A date (2026-12-04, 04.12.2026, 12-04-26 …), an IPv4 address, a dotted version, or
    a decimal number (37.7749295)."""
    sizes = [len(g) for g in groups]
    if len(groups) == 3 and len(separators) == 1:
        if sizes[0] == 4 and sizes[1] <= 2 and sizes[2] <= 2:
            return True
        if sizes[0] <= 2 and sizes[1] <= 2 and sizes[2] in (2, 4):
            return True
    # Dotted, only the North American way of writing a phone is one: 415.555.2671.
    dotted_phone = len(groups) == 3 and sizes[0] >= 2 and sizes[1] >= 3 and sizes[2] == 4
    return separators == {"."} and not dotted_phone


def _glued(text: str, start: int, end: int, *, plus: bool = False) -> bool:
    """Whether the run is part of a longer identifier or a timestamp: a letter or digit
    right before or after it, or one behind a joining character (``T`` of an ISO time,
    ``ORD-`` of an order number, ``:40`` of a time)."""
    before = text[start - 1] if start else ""
    after = text[end] if end < len(text) else ""
    if _word(before) or _word(after):
        return True
    if not plus and before in _GLUE and start >= 2 and _word(text[start - 2]):
        return True  # (an international number may follow "tel:")
    return after in _GLUE and end + 1 < len(text) and _word(text[end + 1])


def _word(char: str) -> bool:
    """An ASCII letter or digit: "电话13812345678" is a phone number after a word."""
    return char.isascii() and char.isalnum()


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
