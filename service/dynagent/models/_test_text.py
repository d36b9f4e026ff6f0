"""What the offline ``test`` model reads from a request and writes back.

Its answer shows what it was given, deterministically: the caller's words, each tool it
called with its arguments and result, and the start of the agent's system prompt. So an
edit of an agent's prompt, or a prompt variable a caller sends, shows in the next answer
(not only in a new revision hash), and ``What is 17 * 23?`` on an agent with the
calculator answers ``calculator(17 * 23) -> 391``: a string argument whose example is
arithmetic takes the arithmetic in the caller's words.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dynagent import _regex
from dynagent.models.base import Message

PROMPT_SHOWN = 160
"""Characters of the system prompt an answer shows (whitespace folded)."""
WORDS_SHOWN = 2000
"""Characters of the caller's words an answer shows: a 1 MB question is not streamed back."""
CALL_SHOWN = 200
"""Characters of a tool call (name and arguments) an answer shows."""
WORDS_PASSED = 1000
"""Characters of the caller's words a text argument takes."""
_SPACES = _regex.compile(r"\s+")
_NUMBER = r"\(*\s*[-+]?\s*\d+(?:\.\d+)?\s*\)*"
_ARITHMETIC = _regex.compile(_NUMBER + r"(?:\s*(?:\*\*|//|[-+*/%])\s*" + _NUMBER + r")+")
"""Numbers joined by operators, as the calculator reads them (RE2: linear in the text)."""


@dataclass(frozen=True, slots=True)
class Request:
    """What the offline model answers from: the caller's latest words, the system prompt."""

    said: str
    prompt: str

    @classmethod
    def of(cls, messages: Sequence[Message]) -> Request:
        user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        system = next((m for m in messages if m.get("role") == "system"), None)
        return cls(text_of(user) if user else "", text_of(system) if system else "")

    def arithmetic(self) -> str | None:
        """The longest arithmetic expression in the caller's words, if there is one."""
        found = [m.group(0) or "" for m in _ARITHMETIC.finditer(self.said)]
        return max(found, key=len).strip()[:WORDS_PASSED] if found else None

    def fill(self, schema: dict[str, Any]) -> str | None:
        """The caller's words for a string argument, where they fit it; None: its example."""
        examples = schema.get("examples")
        if examples:
            shown = examples[0]
            if isinstance(shown, str) and _ARITHMETIC.fullmatch(shown.strip()):
                return self.arithmetic()
            return None
        if any(key in schema for key in ("enum", "const", "default", "pattern", "format")):
            return None
        return fitted(self.said[:WORDS_PASSED], schema) if self.said else None


def fitted(text: str, schema: dict[str, Any]) -> str | None:
    if len(text) < int(schema.get("minLength", 0)):
        return None
    return text[: int(schema.get("maxLength", len(text)))]


def answer_text(request: Request, messages: Sequence[Message]) -> str:
    """``[test model] you said: …; tool(args) -> result; …; prompt: …``."""
    said = _cut(request.said, WORDS_SHOWN)
    parts = [f"[test model] you said: {said}" if said else "[test model] hello"]
    parts.extend(_tool_results(messages))
    if request.prompt:
        parts.append(f"prompt: {_shown(request.prompt)}")
    return " | ".join(parts)


def _tool_results(messages: Sequence[Message]) -> list[str]:
    """Each call of this turn (since the caller's latest words) and what it returned."""
    start = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    calls: dict[str, str] = {}
    results: list[str] = []
    for message in messages[start + 1 :]:
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            calls[call.get("id", "")] = _call(function.get("name", ""), function.get("arguments"))
        if message.get("role") == "tool":
            shown = calls.get(message.get("tool_call_id", ""), "a tool")
            results.append(f"{_cut(shown, CALL_SHOWN)} -> {_cut(text_of(message), WORDS_SHOWN)}")
    return results[-8:]


def _call(name: str, arguments: Any) -> str:
    try:
        values = json.loads(arguments or "{}")
    except ValueError:
        return f"{name}({arguments})"
    if not isinstance(values, dict):
        return f"{name}({arguments})"
    shown = (v if isinstance(v, str) else json.dumps(v) for v in values.values())
    return f"{name}({', '.join(shown)})"


def _shown(prompt: str) -> str:
    return _cut(_SPACES.sub(" ", prompt[: 4 * PROMPT_SHOWN]).strip(), PROMPT_SHOWN)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def text_of(message: Message) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)
