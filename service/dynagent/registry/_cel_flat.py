"""Reading a CEL expression's literal map keys, and flattening them into plain variables.

An expression that reads a map only by literal keys (``headers["x-tenant"]``,
``headers.x``, ``has(headers.x)``, ``"x" in headers``) needs none of the map's other
entries, and need not see a map at all: each read becomes a variable of its own, set to
the entry's value when the request has it (a missing one stays undefined, which fails
the expression exactly as the missing key would), and each test of presence a boolean.
Handing the CEL interpreter a few strings instead of a map is most of what a decision
costs. Anything else (a comprehension over the map, ``size(headers)``, an escaped or raw
key) keeps the map whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple


class Token(NamedTuple):
    kind: str
    """``str`` (a literal, quotes kept), ``id`` or ``op`` (one character)."""
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Slot:
    """One flattened read: variable ``name`` holds map ``source``'s entry ``key`` (its
    value, or whether it is there when ``present``)."""

    name: str
    source: str
    key: str
    present: bool


def tokens(source: str) -> list[Token]:
    """``source`` in one pass, no backtracking."""
    found: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        char = source[i]
        if char.isspace():
            i += 1
            continue
        if char in "\"'" or (char in "rRbB" and source[i + 1 : i + 2] in ("'", '"')):
            end = _string_end(source, i + (0 if char in "\"'" else 1))
            kind = "str"
        elif char.isalpha() or char == "_":
            end = i + 1
            while end < n and (source[end].isalnum() or source[end] == "_"):
                end += 1
            kind = "id"
        else:
            end, kind = i + 1, "op"
        found.append(Token(kind, source[i:end], i, end))
        i = end
    return found


def literal_keys(source: str, name: str) -> frozenset[str] | None:
    """The keys of map ``name`` that ``source`` reads, when it reads it only by literal
    keys; else None."""
    reads = _reads(tokens(source), name)
    return None if reads is None else frozenset(key for _, _, key, _ in reads)


def flattened(source: str, maps: Mapping[str, frozenset[str] | None]) -> tuple[str, list[Slot]]:
    """``source`` with every literal read of the maps whose keys are all literal replaced
    by a variable of its own, and those variables."""
    found = tokens(source)
    edits: list[tuple[int, int, Slot]] = []
    for name, keys in maps.items():
        reads = _reads(found, name) if keys is not None else None
        for start, end, key, present in reads or ():
            slot = Slot(f"__dynagent_{len(edits)}", name, key, present)
            edits.append((found[start].start, found[end].end, slot))
    text = source
    for begin, finish, slot in sorted(edits, key=lambda e: e[0], reverse=True):
        text = text[:begin] + slot.name + text[finish:]
    return text, [slot for _, _, slot in edits]


def _reads(found: list[Token], name: str) -> list[tuple[int, int, str, bool]] | None:
    """Each read of map ``name``: (first token, last token, key, a test of presence);
    None when one is not by a literal key."""
    if any(t.kind == "str" and t.text[:1] in "rRbB" for t in found):
        return None  # raw and bytes literals: not worth reading keys from
    reads = []
    for index, token in enumerate(found):
        if token.kind != "id" or token.text != name or _is_member(found, index):
            continue
        read = _read(found, index)
        if read is None:
            return None
        reads.append(read)
    return reads


def _read(found: list[Token], index: int) -> tuple[int, int, str, bool] | None:
    def shape(at: int, *wanted: tuple[str, str | None]) -> bool:
        window = found[at : at + len(wanted)]
        return len(window) == len(wanted) and all(
            t.kind == kind and (text is None or t.text == text)
            for t, (kind, text) in zip(window, wanted, strict=True)
        )

    if shape(index - 2, ("id", "has"), ("op", "(")) and shape(
        index, ("id", None), ("op", "."), ("id", None), ("op", ")")
    ):
        return index - 2, index + 3, found[index + 2].text, True
    if shape(index + 1, ("op", "["), ("str", None), ("op", "]")):
        key = _unquoted(found[index + 2].text)
        return None if key is None else (index, index + 3, key, False)
    if shape(index + 1, ("op", "."), ("id", None)) and not shape(index + 3, ("op", "(")):
        return index, index + 2, found[index + 2].text, False
    if shape(index - 2, ("str", None), ("id", "in")):
        key = _unquoted(found[index - 2].text)
        return None if key is None else (index - 2, index, key, True)
    return None


def _is_member(found: list[Token], index: int) -> bool:
    """``x.headers``: a field named like the map, not the map."""
    return index > 0 and (found[index - 1].kind, found[index - 1].text) == ("op", ".")


def _unquoted(literal: str) -> str | None:
    """A plain string literal's text; None for one with escapes or triple quotes."""
    if "\\" in literal or literal.startswith(("'''", '"""')):
        return None
    return literal[1:-1]


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
