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
from dynagent.registry._cel_flat import Slot, flattened, literal_keys

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
    slots: tuple[Slot, ...] = ()
    """The literal reads of maps, each a variable of its own (``_cel_flat.py``)."""
    whole: tuple[str, ...] = ()
    """The names handed over as they are (strings, and maps read otherwise)."""
    flat: bool = True
    """No map is handed over whole: the context's items are their own memo key."""
    errors: int = 0
    """Evaluations that failed (the request was not eligible)."""
    _memo: OrderedDict[tuple[Any, ...], bool] = field(default_factory=OrderedDict, repr=False)

    def eligible(self, attributes: Mapping[str, Any]) -> bool:
        """Whether a request with these attributes may reach the canary."""
        context = {name: self._projected(name, attributes.get(name)) for name in self.whole}
        for slot in self.slots:
            mapping = attributes.get(slot.source)
            if not isinstance(mapping, Mapping):
                mapping = {}
            # A request's header mapping compares names without case.
            if slot.present:
                context[slot.name] = slot.key in mapping
            elif slot.key in mapping:
                context[slot.name] = str(mapping[slot.key])
        items = tuple(context.items())
        memo_key = items if self.flat else tuple(map(_frozen, items))
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
        if name == "headers":  # names lower-cased, as HTTP compares them
            return {str(key).lower(): str(v) for key, v in mapping.items()}
        return {str(key): str(v) for key, v in mapping.items()}


def _frozen(item: tuple[str, Any]) -> Any:
    name, value = item
    return (name, tuple(sorted(value.items()))) if isinstance(value, dict) else item


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
    keys = {name: literal_keys(source, name) for name in reads if name in MAPS}
    flat, slots = flattened(source, keys)
    whole = tuple(n for n in reads if n not in MAPS or keys.get(n) is None)
    only_strings = not any(name in MAPS for name in whole)
    return Match(source, cel.compile(flat), reads, keys, tuple(slots), whole, only_strings)


def _bound(source: str) -> list[str]:
    """The variables comprehensions bind (``headers.exists(k, …)``: ``k``)."""
    return [m.group(1) or "" for m in _MACRO.finditer(source)]
