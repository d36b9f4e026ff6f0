"""Suite documents: validated like agent documents, errors naming their path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynagent.evals import EvalSuite, is_suite_key, load_suite
from dynagent.exceptions import ConfigError

SAMPLE = Path(__file__).parents[2] / "config-samples" / "agents" / "support-bot.evals.yaml"

GOOD = """
cases:
  - id: refund-policy
    input: Can I get a refund?
    variables: {company: ACME}
    history:
      - {role: user, content: I bought a kettle}
      - {role: assistant, content: "Which order?"}
    trials: 3
    pass_trials: 0.66
    tags: [policy]
    tool_results:
      lookup_order: '{"status": "shipped"}'
      current_time: ["09:00", "09:05"]
    assert:
      - {type: icontains, value: refund, weight: 2, metric: policy}
      - {type: tool-called, value: lookup_order, args: {order_id: "1234"}}
      - {type: json-path, path: "$.decision", equals: deny}
      - {type: llm-rubric, value: Never promises a refund, threshold: 0.7}
      - {type: max-cost, value: 0.02}
pass: {min_pass_rate: 0.9, min_mean_score: 0.8, no_regressions: true}
judge: {agent: judge-bot, concurrency: 2, timeout: 30}
"""


def refused(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        load_suite(text, source="bot.evals.yaml", agent="bot")
    assert (caught.value.source, caught.value.agent) == ("bot.evals.yaml", "bot")
    return [str(issue) for issue in caught.value.issues] or [caught.value.reason]


def test_a_full_suite_loads_with_its_defaults_and_a_content_revision() -> None:
    suite = load_suite(GOOD)
    again = load_suite(yaml.safe_load(GOOD))
    assert (len(suite.cases), suite.needs_judge, suite.revision) == (1, 1, again.revision)
    assert suite.cases[0].tool_results["current_time"] == ("09:00", "09:05")
    assert load_suite(
        "cases: [{id: a, input: hi, assert: [{type: is-json}]}]"
    ).pass_.model_dump() == {
        "min_pass_rate": 1.0,
        "min_mean_score": None,
        "no_regressions": False,
    }


def test_the_shipped_sample_suite_validates() -> None:
    suite = load_suite(SAMPLE.read_text(encoding="utf-8"), source=str(SAMPLE))
    assert isinstance(suite, EvalSuite) and suite.cases


def case_with(check: str) -> str:
    first = "{id: a, input: hi, assert: [{type: contains, value: x}]}"
    return f"cases:\n  - {first}\n  - {{id: b, input: hi, assert: [{check}]}}\n"


ONE = "cases: [{id: a, input: hi, assert: [{type: is-json}]}]"


@pytest.mark.parametrize(
    ("check", "issue"),
    [
        (
            "{type: contains, valu: x}",
            "cases[#2].assert[#1].valu: unknown field 'valu' in cases[#2].assert[#1]; "
            "did you mean 'value'?",
        ),
        (
            "{type: javascript, value: 'output.length > 3'}",
            "cases[#2].assert[#1]: Input tag 'javascript'",
        ),
        (
            "{type: regex, value: '(?=lookahead)'}",
            "cases[#2].assert[#1].value: Value error, pattern '(?=lookahead)' is not supported",
        ),
        (
            "{type: regex, value: '" + "a" * 1001 + "'}",
            "cases[#2].assert[#1].value: Value error, pattern",
        ),
        (
            "{type: is-json, value: {type: strin}}",
            "cases[#2].assert[#1].value: Value error, not a valid JSON Schema",
        ),
        (
            "{type: is-json, value: {$ref: 'https://example.com/s.json'}}",
            "cases[#2].assert[#1].value: Value error",
        ),
        (
            "{type: json-path, path: '$..a'}",
            "cases[#2].assert[#1].path: Value error, unsupported JSON path at '..a'",
        ),
        (
            "{type: json-path, path: '$[?(@.a)]'}",
            "cases[#2].assert[#1].path: Value error, unsupported JSON path",
        ),
        (
            "{type: max-steps, value: -1}",
            "cases[#2].assert[#1].value: Input should be greater than or equal to 0",
        ),
        (
            "{type: contains, value: x, weight: -1}",
            "cases[#2].assert[#1].weight: Input should be greater than or equal to 0",
        ),
        ("{type: tool-called}", "cases[#2].assert[#1].value: Field required"),
    ],
)
def test_a_bad_check_is_refused_naming_its_path(check: str, issue: str) -> None:
    issues = refused(case_with(check))
    assert any(found.startswith(issue) for found in issues), issues


@pytest.mark.parametrize(
    ("text", "issue"),
    [
        ("cases: []", "cases: "),
        ("cases: [{id: a, input: hi, assert: []}]", "cases[#1].assert: "),
        ("cases: [{id: a, input: hi, trials: 0, assert: [{type: is-json}]}]", "cases[#1].trials: "),
        (
            "cases: [{id: a, input: hi, pass_trials: 1.5, assert: [{type: is-json}]}]",
            "cases[#1].pass_trials: ",
        ),
        (
            "cases: [{id: a, input: hi, history: [{role: tool, content: x}],"
            " assert: [{type: is-json}]}]",
            "cases[#1].history[#1].role: ",
        ),
        (
            "cases: [{id: a, input: hi, tool_results: {t: []}, assert: [{type: is-json}]}]",
            "cases[#1].tool_results: ",
        ),
        (
            ONE + "\npass: {min_pass_rate: 2}",
            "pass.min_pass_rate: ",
        ),
        (
            ONE + "\npass: {min_pas_rate: 1}",
            "pass.min_pas_rate: unknown field 'min_pas_rate' in pass; "
            "did you mean 'min_pass_rate'?",
        ),
        (
            ONE + "\njudge: {agnt: j}",
            "judge.agnt: unknown field 'agnt' in judge; did you mean 'agent'?",
        ),
        (
            ONE + "\njudge: {agent: j, concurrency: 0}",
            "judge.concurrency: ",
        ),
        (
            "cases: [{id: a, input: hi, assert: [{type: is-json}]},"
            " {id: a, input: ho, assert: [{type: is-json}]}]",
            "<root>: Value error, two cases have the id 'a'",
        ),
        (
            "cases: [{id: a, input: hi, assert: [{type: llm-rubric, value: polite}]}]",
            "<root>: Value error, llm-rubric and pairwise checks are scored by a judge",
        ),
        (
            "cases: [{id: a, input: hi, reference: hello, assert: [{type: pairwise}]}]",
            "<root>: Value error, llm-rubric and pairwise checks are scored by a judge",
        ),
        (
            "cases: [{id: a, input: hi, assert: [{type: pairwise, threshold: 2}]}]",
            "cases[#1].assert[#1].threshold: Input should be less than or equal to 1",
        ),
        (
            ONE + "\ncase: []",
            "case: unknown field 'case'",
        ),
        ("- just a list", "an evaluation suite must be a mapping of fields"),
        ("cases: [unclosed", "evaluation suite not valid YAML: line 1"),
    ],
)
def test_a_bad_suite_is_refused_naming_its_path(text: str, issue: str) -> None:
    issues = refused(text)
    assert any(found.startswith(issue) for found in issues), issues


def test_suite_keys_are_the_evals_documents_of_files_and_data_ids() -> None:
    assert [
        is_suite_key(k)
        for k in ("bot.evals.yaml", "bot.evals.yml", "bot.evals.json", "g/bot.EVALS.yaml")
    ] == [True] * 4
    assert [
        is_suite_key(k) for k in ("bot.yaml", "bot.agent.yaml", "bot.canary.yaml", "evals.yaml")
    ] == [False] * 4
