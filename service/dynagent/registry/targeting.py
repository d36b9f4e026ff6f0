"""``rollout.match``: which requests may reach a canary, as a CEL expression over the
request's attributes, decided before the canary's weight applies.

    rollout:
      weight: 20
      match: 'caller == "staff" || headers["x-tenant"] == "acme"'

The names an expression may read:

- ``caller``: the API key's name (``anonymous`` when auth is off);
- ``headers``: the request's headers, names lower-cased;
- ``variables``: the prompt variables the request sends;
- ``metadata``: the request's ``metadata`` (OpenAI routes; ``{}`` elsewhere);
- ``user``: the request's ``user`` (OpenAI routes; ``""`` elsewhere).

Expressions are compiled once, when the canary is built, with the CEL library
``common-expression-language`` (the Rust ``cel`` interpreter): a syntax error or an
unknown name is a build error naming ``rollout.match``. A request for which the
expression fails (a missing header read with ``[…]``) or gives anything but ``true`` is
not eligible. Evaluation is bounded: the expression is at most ``MAX_LENGTH``
characters with at most ``MAX_MACROS`` comprehensions, and it sees only the map keys
it names when it names them literally (``headers["x-tenant"]``, ``headers.x``,
``"x" in headers``), so a request with many headers costs what the expression reads.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cel

from dynagent import _regex

NAMES = ("caller", "headers", "variables", "metadata", "user")
MAPS = frozenset({"headers", "variables", "metadata"})
MAX_LENGTH = 2000
MAX_MACROS = 4
MEMO = 1024
"""Decisions remembered by the values the expression reads (CEL has no side effects and
no clock, so the same values always decide the same)."""

_MACRO = _regex.compile(r"\.(?:all|exists|exists_one|map|filter)\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,")


class MatchError(ValueError):
    """Why an expression cannot be a ``rollout.match``."""


@dataclass(slots=True, eq=False)
class Match:
    """A compiled ``rollout.match``."""

    source: str
    program: Any = field(repr=False)
    reads: tuple[str, ...]
    """The names the expression reads."""
    keys: Mapping[str, frozenset[str] | None]
    """Per map it reads: the keys it names literally, or None when it needs the map whole."""
    errors: int = 0
    """Evaluations that failed (the request was not eligible)."""
    _memo: OrderedDict[tuple[Any, ...], bool] = field(default_factory=OrderedDict, repr=False)

    def eligible(self, attributes: Mapping[str, Any]) -> bool:
        """Whether a request with these attributes may reach the canary."""
        context = {name: self._projected(name, attributes.get(name)) for name in self.reads}
        memo_key = tuple(_frozen(context[name]) for name in self.reads)
        known = self._memo.get(memo_key)
        if known is not None:
            self._memo.move_to_end(memo_key)
            return known
        try:
            decided = self.program.execute(context) is True
        except Exception:  # any failure of the expression: not eligible
            self.errors += 1
            decided = False
        self._memo[memo_key] = decided
        if len(self._memo) > MEMO:
            self._memo.popitem(last=False)
        return decided

    def _projected(self, name: str, value: Any) -> Any:
        if name not in MAPS:
            return value if isinstance(value, str) else ""
        mapping = value if isinstance(value, Mapping) else {}
        wanted = self.keys.get(name)
        if wanted is None:
            if name == "headers":  # names lower-cased, as HTTP compares them
                return {str(key).lower(): str(v) for key, v in mapping.items()}
            return {str(key): str(v) for key, v in mapping.items()}
        # A header mapping of the request compares names without case.
        return {key: str(mapping[key]) for key in wanted if key in mapping}


def _frozen(value: Any) -> Any:
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def compile_match(source: str) -> Match:
    """Compile ``source``; ``MatchError`` says what is wrong with it."""
    if len(source) > MAX_LENGTH:
        raise MatchError(f"longer than {MAX_LENGTH} characters")
    if len(_bound(source)) > MAX_MACROS:
        raise MatchError(f"more than {MAX_MACROS} comprehensions (all, exists, map, filter)")
    try:
        program = cel.compile(source)
    except ValueError as exc:
        raise MatchError(str(exc).replace("\n", " ")[:500]) from None
    bound = set(_bound(source))
    unknown = sorted(set(program.variables()) - set(NAMES) - bound)
    if unknown:
        raise MatchError(f"unknown name {unknown[0]!r}; known: {', '.join(NAMES)}")
    reads = tuple(name for name in NAMES if name in program.variables())
    keys = {name: _literal_keys(source, name) for name in reads if name in MAPS}
    return Match(source, program, reads, keys)


def _literal_keys(source: str, name: str) -> frozenset[str] | None:
    """The keys of map ``name`` that ``source`` reads, when it reads it only by literal
    keys (``name["k"]``, ``name.k``, ``has(name.k)``, ``"k" in name``); else None."""
    tokens = _tokens(source)
    if any(kind == "str" and text[:1] in "rRbB" for kind, text in tokens):
        return None  # raw and bytes literals: not worth reading keys from, pass it whole
    keys: set[str] = set()
    for index, (kind, text) in enumerate(tokens):
        if kind != "id" or text != name or _is_member(tokens, index):
            continue
        key = _key_after(tokens, index) or _key_before(tokens, index)
        if key is None:
            return None
        keys.add(key)
    return frozenset(keys)


def _is_member(tokens: list[tuple[str | None, str]], index: int) -> bool:
    """``x.headers``: a field named like the map, not the map."""
    return index > 0 and tokens[index - 1] == ("op", ".")


def _key_after(tokens: list[tuple[str | None, str]], index: int) -> str | None:
    rest = tokens[index + 1 : index + 4]
    if len(rest) >= 3 and rest[0] == ("op", "[") and rest[1][0] == "str" and rest[2] == ("op", "]"):
        return _unquoted(rest[1][1])
    if len(rest) >= 2 and rest[0] == ("op", ".") and rest[1][0] == "id":
        called = len(rest) >= 3 and rest[2] == ("op", "(")
        return None if called else rest[1][1]
    return None


def _key_before(tokens: list[tuple[str | None, str]], index: int) -> str | None:
    if index >= 2 and tokens[index - 1] == ("id", "in") and tokens[index - 2][0] == "str":
        return _unquoted(tokens[index - 2][1])
    return None


def _unquoted(literal: str) -> str | None:
    """A plain string literal's text; None for one with escapes or raw prefixes (then the
    map is passed whole rather than guessing what the escape means)."""
    if literal[:1] in "rR" or "\\" in literal or literal.startswith(("'''", '"""')):
        return None
    return literal[1:-1]


def _bound(source: str) -> list[str]:
    """The variables comprehensions bind (``headers.exists(k, …)``: ``k``)."""
    return [m.group(1) or "" for m in _MACRO.finditer(source)]


def _tokens(source: str) -> list[tuple[str | None, str]]:
    """``source`` as (kind, text) tokens: ``str`` literals (quotes kept), ``id``
    identifiers and one-character ``op``s; one pass, no backtracking."""
    tokens: list[tuple[str | None, str]] = []
    i, n = 0, len(source)
    while i < n:
        char = source[i]
        if char.isspace():
            i += 1
        elif char in "\"'" or (char in "rRbB" and source[i + 1 : i + 2] in ("'", '"')):
            end = _string_end(source, i + (0 if char in "\"'" else 1))
            tokens.append(("str", source[i:end]))
            i = end
        elif char.isalpha() or char == "_":
            end = i + 1
            while end < n and (source[end].isalnum() or source[end] == "_"):
                end += 1
            tokens.append(("id", source[i:end]))
            i = end
        else:
            tokens.append(("op", char))
            i += 1
    return tokens


def _string_end(source: str, start: int) -> int:
    """The index after the string literal whose opening quote is at ``start``."""
    quote = source[start] * 3 if source.startswith(source[start] * 3, start) else source[start]
    i = start + len(quote)
    while i < len(source):
        if source[i] == "\\":
            i += 2
        elif source.startswith(quote, i):
            return i + len(quote)
        else:
            i += 1
    return len(source)
