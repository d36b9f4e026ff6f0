"""Backtests from production: recent traces of an agent turned into a suite.

Each answered run becomes a case: its input, the earlier turns of its conversation, the
tool results it got (per tool, in call order), and the answer it gave as ``reference``;
its one check is ``pairwise``: the judge compares the candidate's answer with that
reference. A captured case replays: every tool answers its recorded result, and a tool
the recorded run never called answers the placeholder (``live_tools: false``), so
replaying never calls a real tool.

Pure: traces in (as ``GET /v1/traces/{id}`` shows them, masked), a suite document out.
Every text is cut to the suite's limits, so a hostile trace makes a bounded case.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynagent import _regex
from dynagent.evals.spec import MAX_TEXT

MAX_LAST = 1000
"""Runs one capture turns into cases at most."""
MAX_TURNS = 200
"""Earlier turns kept per case (the latest)."""
MAX_RESULTS = 100
"""Recorded results kept per tool and case (the replay repeats the last one)."""
HISTORY_CHARS = 200_000
"""Characters of earlier turns kept per case (the latest turns that fit)."""
MAX_SUITE_CHARS = 20_000_000
"""Characters of text in one captured suite: the runs past it are left out, so a long
session repeated in every case cannot make a capture grow without bound."""
CUT = " …[cut]"

_UNSAFE = _regex.compile(r"[^A-Za-z0-9_.:-]")


@dataclass(frozen=True, slots=True)
class CapturedRun:
    """What a case needs from one answered run."""

    trace_id: str
    input: str
    answer: str
    turns: tuple[dict[str, str], ...]
    """Earlier turns the run's own input carried (a list of messages)."""
    tool_results: Mapping[str, tuple[str, ...]]


def captured_run(trace: Mapping[str, Any]) -> CapturedRun | str:
    """The run recorded in ``trace``, or why it cannot be a case."""
    events = [e for e in trace.get("events", ()) if isinstance(e, Mapping)]
    started = next((e for e in events if e.get("type") == "run_started"), None)
    final = next((e for e in reversed(events) if e.get("type") == "final_output"), None)
    if started is None or final is None:
        return "the run gave no answer"
    turns, text = _split_input(started.get("input"))
    if not text.strip():
        return "the run's input has no user text"
    if len(text) > MAX_TEXT:
        return f"the run's input is longer than {MAX_TEXT} characters"
    output = final.get("output")
    answer = output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)
    return CapturedRun(
        str(trace.get("trace_id", "")),
        text,
        _cut(answer),
        tuple(turns),
        _tool_results(events),
    )


def _tool_results(events: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Each tool's results in the order the run called it (calls made at once finish in
    any order; the replay answers them in call order)."""
    outputs = {
        e.get("call_id"): str(e.get("output", "")) for e in events if e.get("type") == "tool_result"
    }
    results: dict[str, list[str]] = {}
    for event in events:
        name, call = event.get("name"), event.get("call_id")
        if event.get("type") != "tool_call" or not isinstance(name, str) or call not in outputs:
            continue
        kept = results.setdefault(name, [])
        if len(kept) < MAX_RESULTS:
            kept.append(_cut(outputs[call]))
    return {name: tuple(texts) for name, texts in results.items()}


def _split_input(value: Any) -> tuple[list[dict[str, str]], str]:
    """A run's input as (earlier turns, the user text it answered)."""
    if isinstance(value, str):
        return [], value
    messages = [m for m in value if isinstance(m, Mapping)] if isinstance(value, list) else []
    last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    if last_user < 0:
        return [], ""
    turns = [t for t in (_turn(m) for m in messages[:last_user]) if t is not None]
    return turns, content_text(messages[last_user].get("content"))


def _turn(message: Mapping[str, Any]) -> dict[str, str] | None:
    role, text = message.get("role"), content_text(message.get("content"))
    if role not in ("user", "assistant", "system") or not text:
        return None  # tool messages and tool-call-only turns: the results are recorded apart
    return {"role": str(role), "content": _cut(text)}


def content_text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = (p.get("text") for p in content if isinstance(p, Mapping))
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def session_turns(
    earlier: Sequence[CapturedRun], own: Sequence[dict[str, str]] = ()
) -> list[dict[str, str]]:
    """The turns before a run: those of earlier runs of its conversation (oldest first),
    then those its own input carried; the latest that fit ``MAX_TURNS`` and
    ``HISTORY_CHARS``."""
    turns: list[dict[str, str]] = []
    for run in earlier:
        turns += [{"role": "user", "content": run.input}]
        turns += [{"role": "assistant", "content": run.answer}]
    kept: list[dict[str, str]] = []
    size = 0
    for turn in reversed([*turns, *own]):
        size += len(turn["content"])
        if size > HISTORY_CHARS or len(kept) >= MAX_TURNS:
            break
        kept.append(turn)
    return kept[::-1]


def case_size(run: CapturedRun, history: Iterable[dict[str, str]]) -> int:
    """About how many characters of text the case of ``run`` holds."""
    results = sum(len(text) for texts in run.tool_results.values() for text in texts)
    return len(run.input) + len(run.answer) + results + sum(len(t["content"]) for t in history)


def suite_document(
    runs: Sequence[tuple[CapturedRun, Sequence[dict[str, str]]]],
    *,
    judge: str,
    rubric: str | None = None,
) -> dict[str, Any]:
    """The suite of ``runs``, each with the turns before it (``session_turns``)."""
    check: dict[str, Any] = {"type": "pairwise", "threshold": 0.5}
    if rubric:
        check["value"] = rubric
    cases = [_case(run, earlier, check) for run, earlier in runs]
    return {"judge": {"agent": judge}, "cases": cases}


def _case(
    run: CapturedRun, earlier: Sequence[dict[str, str]], check: dict[str, Any]
) -> dict[str, Any]:
    case: dict[str, Any] = {"id": case_id(run.trace_id), "input": run.input}
    if earlier:
        case["history"] = list(earlier)
    if run.tool_results:
        case["tool_results"] = {
            name: results[0] if len(results) == 1 else list(results)
            for name, results in run.tool_results.items()
        }
    case.update({"live_tools": False, "tags": ["captured"], "reference": run.answer})
    case["assert"] = [dict(check)]
    return case


def case_id(trace_id: str) -> str:
    """``trace-<trace id>``, in the characters a case id may have."""
    return "trace-" + _UNSAFE.sub("_", trace_id)[:120]


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - len(CUT)] + CUT
