"""The assertion engine: one check against what one run produced. Pure: no I/O.

Every check runs in time linear in the answer (RE2 for patterns, one pass for the
texts, at most ``JSON_ATTEMPTS`` parses for ``contains-json``) and parses no more than
``MAX_JSON_CHARS`` of it as JSON, so a hostile answer costs what its length costs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from dynagent.evals._json_path import MISSING, lookup, parse_path
from dynagent.evals.spec import (
    Assertion,
    CeilingCheck,
    EqualsCheck,
    JsonCheck,
    JsonPathCheck,
    PairwiseCheck,
    RegexCheck,
    RubricCheck,
    TextCheck,
    ToolCheck,
)
from dynagent.spec._schemas import compiled_pattern, validator

MAX_JSON_CHARS = 1_000_000
"""An answer longer than this is not parsed as JSON (its checks fail, saying so)."""

JSON_ATTEMPTS = 32
"""Positions ``contains-json`` tries to parse a JSON value at, each in linear time."""

_NOT_JSON: Any = object()


# The records of one run (``ToolCall``, ``Outcome``, ``Verdict``, and the trial's and the
# case's in ``verdicts`` and ``runner``) are built once and never changed, but are not
# frozen: a frozen dataclass sets each field through ``object.__setattr__`` (a ``Verdict``
# costs 0.73 µs to make instead of 0.17 µs), and a suite makes seven of them per case.


@dataclass(slots=True)
class ToolCall:
    """One tool call of a run: its arguments and the result the model saw."""

    name: str
    args: Mapping[str, Any]
    result: str | None = None


@dataclass(slots=True)
class Outcome:
    """What one run of a case produced."""

    answer: str
    output: Any = None
    """The parsed structured output, when the agent has an output schema."""
    tool_calls: tuple[ToolCall, ...] = ()
    steps: int = 0
    latency_ms: float = 0.0
    tokens: int = 0
    cost: float | None = None
    """None when the model's price is unknown."""


class Verdict(NamedTuple):
    """One check's result: passed or not, a score in 0..1, and why. Immutable, since the
    verdicts a check gives most often are made once and shared (``_said``), and a tuple:
    a frozen dataclass costs four times as much to make, and a suite makes one per check
    per trial."""

    passed: bool
    score: float
    reason: str
    needs_judge: bool = False
    """An ``llm-rubric`` or ``pairwise`` check this engine cannot score: a judge agent must."""
    error: bool = False
    """The check could not be scored (the judge failed or answered no score): never a
    passed check, and shown as the case's error."""


def _verdict(passed: bool, reason: str) -> Verdict:
    return Verdict(passed, 1.0 if passed else 0.0, reason)


def evaluate(assertion: Assertion, outcome: Outcome) -> Verdict:
    """Check ``outcome`` against ``assertion``."""
    check = _CHECKS.get(type(assertion))
    if check is not None:
        return check(assertion, outcome)
    if isinstance(assertion, RegexCheck):
        found = compiled_pattern(assertion.value).search(outcome.answer) is not None
        return _verdict(found, f"{'matches' if found else 'does not match'} the pattern")
    if isinstance(assertion, RubricCheck | PairwiseCheck):
        return Verdict(False, 0.0, "needs a judge", needs_judge=True)
    raise TypeError(f"no check for {type(assertion).__name__}")


def _text(check: TextCheck, outcome: Outcome) -> Verdict:
    answer = outcome.answer
    kind = check.type
    if kind in {"icontains", "not-icontains"}:
        found = check.value.casefold() in answer.casefold()
    else:
        found = check.value in answer
    value = check.value
    return (_said if len(value) <= SHARED_TEXT else _saying)(kind, value, found)


def _saying(kind: str, value: str, found: bool) -> Verdict:
    wanted = not kind.startswith("not-")
    said = "contains" if found else "does not contain"
    return _verdict(found == wanted, f"the answer {said} {_shown(value)}")


SHARED_TEXT = 1000
"""Characters of a text check's value up to which its verdicts are made once and shared:
a suite asks every trial, and the cache keeps at most 1,024 such values (about 1 MB)."""
_said = functools.lru_cache(maxsize=1024)(_saying)


def _equals(check: EqualsCheck, outcome: Outcome) -> Verdict:
    if isinstance(check.value, str):
        same = outcome.answer == check.value
        return _verdict(same, f"the answer {'equals' if same else 'differs from'} the value")
    parsed = _parsed(outcome)
    if parsed is _NOT_JSON:
        return _verdict(False, "the answer is not JSON to compare with the value")
    same = _same_json(parsed, check.value)
    return _verdict(same, f"the JSON answer {'equals' if same else 'differs from'} the value")


def _json(check: JsonCheck, outcome: Outcome) -> Verdict:
    if check.type == "is-json":
        found = [] if (parsed := _parsed(outcome)) is _NOT_JSON else [parsed]
    else:
        found = _contained(outcome)
    if not found:
        where = "is not" if check.type == "is-json" else "contains no"
        return _verdict(False, f"the answer {where} JSON")
    if check.value is None:
        return _verdict(True, "the answer is JSON")
    schema = validator(check.value)
    errors: list[str] = []
    for value in found:
        error = next(iter(schema.iter_errors(value)), None)
        if error is None:
            return _verdict(True, "the JSON matches the schema")
        errors.append(error.message)
    return _verdict(False, f"the JSON does not match the schema: {_shown(errors[0])}")


def _json_path(check: JsonPathCheck, outcome: Outcome) -> Verdict:
    parsed = _parsed(outcome)
    if parsed is _NOT_JSON:
        return _verdict(False, "the answer is not JSON")
    value = lookup(parsed, parse_path(check.path))
    if value is MISSING:
        return _verdict(False, f"{check.path} is not in the answer")
    if "equals" not in check.model_fields_set:
        return _verdict(True, f"{check.path} is in the answer")
    same = _same_json(value, check.equals)
    return _verdict(same, f"{check.path} is {_shown(json.dumps(value, ensure_ascii=False))}")


def _tool(check: ToolCheck, outcome: Outcome) -> Verdict:
    named = [call for call in outcome.tool_calls if call.name == check.value]
    if check.args is not None:
        named = [call for call in named if _subset(check.args, call.args)]
    with_args = " with those arguments" if check.args is not None else ""
    if check.type == "tool-called":
        return _verdict(bool(named), f"{check.value} {_times(len(named))}{with_args}")
    return _verdict(not named, f"{check.value} {_times(len(named))}{with_args}")


def _ceiling(check: CeilingCheck, outcome: Outcome) -> Verdict:
    kind = check.type
    measured: float | None
    if kind == "max-steps":  # a few small counts: their verdicts are made once
        return _within(kind, check.value, float(outcome.steps))
    if kind == "max-latency-ms":
        measured = outcome.latency_ms
    elif kind == "max-tokens":
        measured = float(outcome.tokens)
    else:
        measured = outcome.cost
    if measured is None:
        return _verdict(False, f"the run's {kind.removeprefix('max-')} is not known")
    return _measured(kind, check.value, measured)


def _measured(kind: str, ceiling: float, measured: float) -> Verdict:
    within = measured <= ceiling
    what = kind.removeprefix("max-")
    return _verdict(within, f"{what} {measured:g} {'<=' if within else '>'} {ceiling:g}")


_within = functools.lru_cache(maxsize=1024)(_measured)
"""``_measured`` for a count with few values (steps): each verdict made once."""


_CHECKS: dict[type[Any], Callable[[Any, Outcome], Verdict]] = {
    TextCheck: _text,
    EqualsCheck: _equals,
    JsonCheck: _json,
    JsonPathCheck: _json_path,
    ToolCheck: _tool,
    CeilingCheck: _ceiling,
}


def _times(count: int) -> str:
    return "was not called" if count == 0 else f"was called {count} time(s)"


def _subset(wanted: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    """Every key of ``wanted`` is in ``args`` with an equal value (mappings: recursively)."""
    for key, value in wanted.items():
        if key not in args:
            return False
        have = args[key]
        if isinstance(value, Mapping) and isinstance(have, Mapping):
            if not _subset(value, have):
                return False
        elif not _same_json(have, value):
            return False
    return True


def _same_json(left: Any, right: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return left is right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same_json(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_same_json, left, right))
    return type(left) is type(right) and bool(left == right)


def _parsed(outcome: Outcome) -> Any:
    """The answer as JSON: the structured output when there is one, else the parsed text."""
    if outcome.output is not None and not isinstance(outcome.output, str):
        return outcome.output
    return _loads(outcome.answer)


def _loads(text: str) -> Any:
    if len(text) > MAX_JSON_CHARS:
        return _NOT_JSON
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _contained(outcome: Outcome) -> list[Any]:
    """The JSON values found in the answer: each parsed from an opening ``{`` or ``[`` as
    far as it reaches, at most ``JSON_ATTEMPTS`` starts (each parse linear in the text)."""
    whole = _parsed(outcome)
    if whole is not _NOT_JSON:
        return [whole]
    text = outcome.answer[:MAX_JSON_CHARS]
    decoder = json.JSONDecoder()
    found: list[Any] = []
    at, attempts = 0, 0
    while attempts < JSON_ATTEMPTS:
        starts = [i for i in (text.find("{", at), text.find("[", at)) if i >= 0]
        if not starts:
            break
        start = min(starts)
        attempts += 1
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            at = start + 1
            continue
        found.append(value)
        at = end
    return found


def _shown(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")
