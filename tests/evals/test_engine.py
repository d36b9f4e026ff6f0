"""The assertion engine: every check type, passing and failing, and hostile answers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import TypeAdapter

from dynagent.evals import Outcome, ToolCall, Verdict, evaluate
from dynagent.evals.engine import JSON_ATTEMPTS, MAX_JSON_CHARS
from dynagent.evals.spec import Assertion

CHECK: TypeAdapter[Any] = TypeAdapter(Assertion)


def check(**fields: Any) -> Any:
    return CHECK.validate_python(fields)


def outcome(answer: str = "", **fields: Any) -> Outcome:
    return Outcome(answer=answer, **fields)


def passed(assertion: dict[str, Any], run: Outcome) -> bool:
    verdict = evaluate(check(**assertion), run)
    assert 0.0 <= verdict.score <= 1.0 and verdict.reason
    assert verdict.score == (1.0 if verdict.passed else 0.0)
    return verdict.passed


CALLS = (
    ToolCall("lookup_order", {"order_id": "1234", "options": {"deep": True, "n": 2}}, "shipped"),
    ToolCall("calculator", {"expression": "2+2"}, "4"),
)

TABLE: list[tuple[dict[str, Any], Outcome, bool]] = [
    ({"type": "equals", "value": "Yes"}, outcome("Yes"), True),
    ({"type": "equals", "value": "Yes"}, outcome("yes"), False),
    ({"type": "equals", "value": "Yes"}, outcome("Yes "), False),
    ({"type": "equals", "value": {"a": 1}}, outcome('{"a": 1.0}'), True),
    ({"type": "equals", "value": {"a": 1}}, outcome('{"a": true}'), False),
    ({"type": "equals", "value": [1, 2]}, outcome("[1, 2, 3]"), False),
    ({"type": "equals", "value": {"a": 1}}, outcome("not json"), False),
    ({"type": "equals", "value": {"a": 1}}, outcome("", output={"a": 1}), True),
    ({"type": "contains", "value": "refund"}, outcome("no refund today"), True),
    ({"type": "contains", "value": "Refund"}, outcome("no refund today"), False),
    ({"type": "icontains", "value": "REFUND"}, outcome("no refund today"), True),
    ({"type": "icontains", "value": "credit"}, outcome("no refund today"), False),
    ({"type": "not-contains", "value": "refund"}, outcome("no refund today"), False),
    ({"type": "not-contains", "value": "Refund"}, outcome("no refund today"), True),
    ({"type": "not-icontains", "value": "REFUND"}, outcome("no refund today"), False),
    ({"type": "not-icontains", "value": "credit"}, outcome("no refund today"), True),
    ({"type": "regex", "value": r"order \d{4}"}, outcome("your order 1234 left"), True),
    ({"type": "regex", "value": r"^order"}, outcome("your order 1234 left"), False),
    ({"type": "regex", "value": "(?i)ACME"}, outcome("acme support"), True),
    ({"type": "is-json"}, outcome(' {"a": [1, 2]} '), True),
    ({"type": "is-json"}, outcome('here: {"a": 1}'), False),
    ({"type": "is-json"}, outcome(""), False),
    ({"type": "is-json"}, outcome("[" * 100_000 + "]" * 100_000), False),
    (
        {"type": "is-json", "value": {"type": "object", "required": ["id"]}},
        outcome('{"id": 3}'),
        True,
    ),
    (
        {"type": "is-json", "value": {"type": "object", "required": ["id"]}},
        outcome('{"name": 3}'),
        False,
    ),
    (
        {"type": "is-json", "value": {"properties": {"sku": {"pattern": "^[A-Z]{3}$"}}}},
        outcome('{"sku": "abc"}'),
        False,
    ),
    ({"type": "contains-json"}, outcome('Sure: {"a": 1} done'), True),
    ({"type": "contains-json"}, outcome("Sure: {not json} [also not"), False),
    ({"type": "contains-json"}, outcome("{oops} then [1, 2]"), True),
    (
        {"type": "contains-json", "value": {"type": "array"}},
        outcome('{"a": 1} and [1, 2]'),
        True,
    ),
    (
        {"type": "contains-json", "value": {"type": "array", "minItems": 3}},
        outcome('{"a": 1} and [1, 2]'),
        False,
    ),
    (
        {"type": "json-path", "path": "$.order.items[0].sku"},
        outcome('{"order": {"items": [{"sku": "A"}]}}'),
        True,
    ),
    (
        {"type": "json-path", "path": "$.order.items[1]"},
        outcome('{"order": {"items": [{"sku": "A"}]}}'),
        False,
    ),
    ({"type": "json-path", "path": "$['a b']", "equals": 2}, outcome('{"a b": 2}'), True),
    ({"type": "json-path", "path": "$.a", "equals": 2}, outcome('{"a": 3}'), False),
    ({"type": "json-path", "path": "$.a", "equals": None}, outcome('{"a": null}'), True),
    ({"type": "json-path", "path": "$.a", "equals": None}, outcome('{"b": null}'), False),
    ({"type": "json-path", "path": "$[-1]"}, outcome("[1, 2]"), True),
    ({"type": "json-path", "path": "$.a"}, outcome("plain text"), False),
    ({"type": "tool-called", "value": "calculator"}, outcome(tool_calls=CALLS), True),
    ({"type": "tool-called", "value": "send_email"}, outcome(tool_calls=CALLS), False),
    (
        {"type": "tool-called", "value": "lookup_order", "args": {"order_id": "1234"}},
        outcome(tool_calls=CALLS),
        True,
    ),
    (
        {"type": "tool-called", "value": "lookup_order", "args": {"options": {"deep": True}}},
        outcome(tool_calls=CALLS),
        True,
    ),
    (
        {"type": "tool-called", "value": "lookup_order", "args": {"order_id": 1234}},
        outcome(tool_calls=CALLS),
        False,
    ),
    (
        {"type": "tool-called", "value": "lookup_order", "args": {"missing": 1}},
        outcome(tool_calls=CALLS),
        False,
    ),
    ({"type": "tool-not-called", "value": "send_email"}, outcome(tool_calls=CALLS), True),
    ({"type": "tool-not-called", "value": "calculator"}, outcome(tool_calls=CALLS), False),
    (
        {"type": "tool-not-called", "value": "calculator", "args": {"expression": "9*9"}},
        outcome(tool_calls=CALLS),
        True,
    ),
    ({"type": "max-steps", "value": 3}, outcome(steps=3), True),
    ({"type": "max-steps", "value": 3}, outcome(steps=4), False),
    ({"type": "max-latency-ms", "value": 500}, outcome(latency_ms=499.5), True),
    ({"type": "max-latency-ms", "value": 500}, outcome(latency_ms=501), False),
    ({"type": "max-tokens", "value": 100}, outcome(tokens=100), True),
    ({"type": "max-tokens", "value": 100}, outcome(tokens=101), False),
    ({"type": "max-cost", "value": 0.01}, outcome(cost=0.005), True),
    ({"type": "max-cost", "value": 0.01}, outcome(cost=0.02), False),
    ({"type": "max-cost", "value": 0.01}, outcome(cost=None), False),
]


@pytest.mark.parametrize(("assertion", "run", "expected"), TABLE)
def test_every_check_type_passes_and_fails_on_what_it_checks(
    assertion: dict[str, Any], run: Outcome, expected: bool
) -> None:
    assert passed(assertion, run) is expected


def test_the_table_covers_every_check_type_both_ways() -> None:
    from dynagent.evals.spec import ASSERT_TYPES

    seen = {(a["type"], e) for a, _, e in TABLE}
    judged = {"llm-rubric", "pairwise"}
    assert {t for t, _ in seen} == set(ASSERT_TYPES) - judged
    assert all((t, True) in seen and (t, False) in seen for t in set(ASSERT_TYPES) - judged)


@pytest.mark.parametrize(
    "judged", [{"type": "llm-rubric", "value": "polite"}, {"type": "pairwise"}], ids=str
)
def test_a_judged_check_is_left_to_a_judge_and_never_passes_alone(judged: dict[str, Any]) -> None:
    verdict = evaluate(check(**judged), outcome("thanks!"))
    assert verdict == Verdict(False, 0.0, "needs a judge", needs_judge=True)


@given(st.text(max_size=200), st.text(min_size=1, max_size=20))
def test_text_checks_agree_with_python_containment(answer: str, value: str) -> None:
    run = outcome(answer)
    assert passed({"type": "contains", "value": value}, run) is (value in answer)
    assert passed({"type": "not-contains", "value": value}, run) is (value not in answer)
    folded = value.casefold() in answer.casefold()
    assert passed({"type": "icontains", "value": value}, run) is folded
    assert passed({"type": "not-icontains", "value": value}, run) is not folded


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=10,
    )
)
def test_any_json_value_embedded_in_text_is_found(value: Any) -> None:
    import json

    text = f"The result is {json.dumps(value)} as asked."
    if isinstance(value, dict | list):  # a scalar is JSON, but not a value found in prose
        assert passed({"type": "contains-json"}, outcome(text)) is True
    assert passed({"type": "is-json"}, outcome(json.dumps(value))) is True


HOSTILE = {
    "deep brackets": "[" * 200_000,
    "brackets then json": "{" * (JSON_ATTEMPTS + 5) + '{"a": 1}',
    "deep valid nesting": "[" * 50_000 + "]" * 50_000,
    "beyond the JSON limit": '{"a": "' + "x" * MAX_JSON_CHARS + '"}',
    "many opening braces": "{ " * 300_000,
}


@pytest.mark.parametrize("answer", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_answers_get_a_verdict_not_an_exception(answer: str) -> None:
    for assertion in (
        {"type": "contains-json"},
        {"type": "is-json"},
        {"type": "json-path", "path": "$.a"},
        {"type": "equals", "value": {"a": 1}},
        {"type": "regex", "value": "(a+)+b"},
        {"type": "icontains", "value": "zz"},
    ):
        assert passed(assertion, outcome(answer)) is False


def test_contains_json_tries_a_bounded_number_of_starts() -> None:
    # Beyond the attempts budget a value further on is not looked for: the cost of a
    # check stays a fixed multiple of the answer's length.
    hidden = "{x " * (JSON_ATTEMPTS + 1) + '{"a": 1}'
    found = "{x " * (JSON_ATTEMPTS - 1) + '{"a": 1}'
    assert passed({"type": "contains-json"}, outcome(hidden)) is False
    assert passed({"type": "contains-json"}, outcome(found)) is True


steps = st.lists(
    st.integers(min_value=-5, max_value=5)
    | st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,8}", fullmatch=True)
    | st.text(alphabet="ab '\\\"c.[]$", min_size=0, max_size=6),
    max_size=6,
)


@given(steps)
def test_a_json_path_of_names_quoted_names_and_indexes_finds_the_value_it_names(
    path: list[Any],
) -> None:
    import json

    from dynagent.evals._json_path import lookup, parse_path

    written = "$"
    document: Any = "found"
    for step in reversed(path):
        document = [document] * (abs(step) + 1) if isinstance(step, int) else {step: document}
    for step in path:
        if isinstance(step, int):
            written += f"[{step}]"
        else:
            written += "['" + step.replace("\\", "\\\\").replace("'", "\\'") + "']"
    assert parse_path(written) == tuple(path)
    assert lookup(document, parse_path(written)) == "found"
    assert passed(
        {"type": "json-path", "path": written, "equals": "found"}, outcome(json.dumps(document))
    )


def test_a_short_text_checks_verdicts_are_shared_and_cannot_be_changed() -> None:
    # A suite asks every trial the same check: its verdicts are made once, so no caller
    # may change one under the others.
    short = check(type="icontains", value="Paris")
    first, again = evaluate(short, outcome("paris it is")), evaluate(short, outcome("PARIS"))
    assert first is again and first.passed
    with pytest.raises(AttributeError):
        first.passed = False  # type: ignore[misc]
    assert evaluate(short, outcome("Lyon")) == Verdict(
        False, 0.0, "the answer does not contain 'Paris'"
    )


def test_a_long_text_checks_verdicts_are_not_kept() -> None:
    # The shared verdicts hold their check's value: a long one is judged afresh each time,
    # so a suite of long values does not stay in memory after it.
    value = "x" * 50_000
    long = check(type="contains", value=value)
    first, again = evaluate(long, outcome(value)), evaluate(long, outcome(value))
    assert first.passed and first == again and first is not again
