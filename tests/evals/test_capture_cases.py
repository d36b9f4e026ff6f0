"""Traces into suite cases (``evals.capture``): what a case keeps of a run, and the bounds
that hold whatever a hostile trace holds."""

from __future__ import annotations

from typing import Any

from dynagent.evals.capture import (
    HISTORY_CHARS,
    MAX_RESULTS,
    MAX_TURNS,
    CapturedRun,
    captured_run,
    case_id,
    session_turns,
    suite_document,
)
from dynagent.evals.spec import MAX_TEXT, load_suite


def trace(run_input: Any, *events: dict[str, Any], answer: Any = "done") -> dict[str, Any]:
    started = {"type": "run_started", "input": run_input}
    final = [] if answer is None else [{"type": "final_output", "output": answer}]
    return {"trace_id": "t1", "events": [started, *events, *final]}


def call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "tool_call", "call_id": call_id, "name": name, "arguments": "{}"}


def result(call_id: str, name: str, output: str) -> dict[str, Any]:
    return {"type": "tool_result", "call_id": call_id, "name": name, "output": output}


def test_tool_results_are_kept_per_tool_in_call_order_not_in_finishing_order() -> None:
    run = captured_run(
        trace(
            "hi",
            call("a", "lookup"),
            call("b", "lookup"),
            call("c", "weather"),
            result("b", "lookup", "second"),
            result("c", "weather", "sunny"),
            result("a", "lookup", "first"),
            call("d", "lookup"),  # never answered (the run was cut): no result to replay
        )
    )
    assert isinstance(run, CapturedRun)
    assert dict(run.tool_results) == {"lookup": ("first", "second"), "weather": ("sunny",)}


def test_a_run_without_an_answer_or_a_user_text_is_no_case() -> None:
    assert captured_run(trace("hi", answer=None)) == "the run gave no answer"
    assert captured_run(trace("   ")) == "the run's input has no user text"
    no_user = [{"role": "system", "content": "be brief"}]
    assert captured_run(trace(no_user)) == "the run's input has no user text"
    assert captured_run(trace("x" * (MAX_TEXT + 1))) == (
        f"the run's input is longer than {MAX_TEXT} characters"
    )


def test_a_structured_answer_is_the_reference_as_json() -> None:
    run = captured_run(trace("hi", answer={"total": 3, "note": "né"}))
    assert isinstance(run, CapturedRun)
    assert run.answer == '{"total": 3, "note": "né"}'


def test_a_hostile_trace_makes_a_bounded_case() -> None:
    huge = "y" * 1_000_000
    events = [e for i in range(500) for e in (call(f"c{i}", "t"), result(f"c{i}", "t", huge))]
    messages = [{"role": "user", "content": huge}, {"role": "assistant", "content": huge}] * 300
    run = captured_run(trace([*messages, {"role": "user", "content": "q"}], *events, answer=huge))
    assert isinstance(run, CapturedRun)
    assert len(run.tool_results["t"]) == MAX_RESULTS
    assert max(len(text) for text in run.tool_results["t"]) == MAX_TEXT
    assert len(run.answer) == MAX_TEXT
    earlier = [run] * 1000  # a long session before it
    turns = session_turns(earlier, run.turns)
    assert len(turns) <= MAX_TURNS
    assert sum(len(t["content"]) for t in turns) <= HISTORY_CHARS
    document = suite_document([(run, turns)], judge="judge-bot")
    assert load_suite(document).cases[0].tool_results["t"][0].endswith("…[cut]")


def test_the_turns_before_a_run_are_its_sessions_then_its_own_latest_last() -> None:
    first = captured_run(trace("Where is order 7?", answer="Shipped."))
    assert isinstance(first, CapturedRun)
    own = [{"role": "system", "content": "Caller: Ann"}]
    assert session_turns([first], own) == [
        {"role": "user", "content": "Where is order 7?"},
        {"role": "assistant", "content": "Shipped."},
        {"role": "system", "content": "Caller: Ann"},
    ]


def test_case_ids_come_from_trace_ids_in_the_characters_an_id_may_have() -> None:
    assert case_id("4bf92f3577b34da6a3ce929d0e0e4736") == "trace-4bf92f3577b34da6a3ce929d0e0e4736"
    assert case_id("a/b c\n<é>") == "trace-a_b_c____"
    assert len(case_id("x" * 1000)) == 126


def test_a_captured_suite_compares_through_the_judge_with_an_optional_rubric() -> None:
    run = captured_run(trace("hi"))
    assert isinstance(run, CapturedRun)
    document = suite_document([(run, [])], judge="grader", rubric="Polite and correct.")
    suite = load_suite(document)
    assert suite.judge is not None and suite.judge.agent == "grader"
    check = suite.cases[0].assert_[0]
    assert check.model_dump() == {
        "type": "pairwise",
        "value": "Polite and correct.",
        "threshold": 0.5,
        "weight": 1.0,
        "metric": None,
    }
    assert (suite.cases[0].reference, suite.cases[0].live_tools) == ("done", False)
