"""The result of an evaluation run as ``dynagent eval`` prints it: one row per case
(verdict, score, latency, tokens, cost; with ``--compare`` the stable version's verdict
and the change), then each failure with its answer and the check it failed, then the
verdict of the suite."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

SHOWN_ANSWER = 300
"""Characters of a failed case's answer shown."""
WIDTH = 120
"""Columns when the output is not a terminal (a CI log, a file)."""


def show(record: dict[str, Any]) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=WIDTH)
    console.print(_table(record))
    for case in record.get("cases") or []:
        if not case["passed"]:
            console.print(_failure(case))
    console.print(_summary(record))


def _table(record: dict[str, Any]) -> Table:
    compare = {row["id"]: row for row in (record.get("compare") or {}).get("cases", [])}
    title = f"{record['agent']} {record['variant']} {record['revision']}"
    table = Table(title=title, title_justify="left")
    for column in ("case", "verdict", "score", "latency", "tokens", "cost"):
        table.add_column(column, justify="left" if column in ("case", "verdict") else "right")
    if compare:
        table.add_column("stable")
        table.add_column("change")
    for case in record.get("cases") or []:
        row = [
            case["id"],
            _verdict(case),
            f"{case['score']:.2f}",
            f"{case['latency_ms'] / 1000:.2f} s",
            str(case["tokens"]),
            "?" if case["cost"] is None else f"${case['cost']:.4f}",
        ]
        if compare:
            before = compare.get(case["id"])
            row += [_stable(before), _change(before)]
        table.add_row(*row)
    return table


def _verdict(case: dict[str, Any]) -> Text:
    if case.get("error"):
        return Text("error", style="bold red")
    return Text("pass", style="green") if case["passed"] else Text("FAIL", style="bold red")


def _stable(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    return f"{'pass' if row['stable_passed'] else 'FAIL'} {row['stable_score']:.2f}"


def _change(row: dict[str, Any] | None) -> Text:
    if row is None:
        return Text("")
    style = {"regressed": "bold red", "fixed": "green"}.get(row["change"], "")
    return Text(row["change"], style=style)


def _failure(case: dict[str, Any]) -> Text:
    answer = case.get("answer") or ""
    if len(answer) > SHOWN_ANSWER:
        answer = answer[:SHOWN_ANSWER] + " …"
    text = Text()
    text.append(f"✗ {case['id']}", style="bold red")
    text.append(f": {case.get('error') or case['reason']}\n")
    text.append("  answer: ", style="dim")
    text.append(answer or "(none)")
    return text


def _summary(record: dict[str, Any]) -> Text:
    state = record["state"]
    style = "bold green" if state == "passed" else "bold red"
    text = Text()
    text.append(state.upper(), style=style)
    text.append(f" {record['done']} of {record['total']} cases")
    if record.get("pass_rate") is not None:
        text.append(f", pass rate {record['pass_rate']:.0%}, mean score {record['mean_score']:.2f}")
    if record.get("judge"):
        cost = record.get("judge_cost")
        spent = "?" if cost is None else f"${cost:.4f}"
        text.append(f"; judge {record['judge']}: {record['judge_tokens']} tokens, {spent}")
    text.append(f"\n{record.get('reason') or ''}  (run {record['id']})")
    return text
