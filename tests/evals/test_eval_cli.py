"""``dynagent eval``: the real command against a served service. Its table names each
case's verdict and each failure's answer and check; its status is 0 when the rule
passes, 1 when it fails, 2 when the run could not start (bad option or file, refusal,
no service)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent import cli
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.process import free_port
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "user-key-0123456789abcdef"
CANARY_MODEL = "gpt-canary"
SUITE = {
    "cases": [
        {"id": "greet", "input": "say hello", "assert": [{"type": "icontains", "value": "hello"}]},
        {"id": "refund", "input": "refund?", "assert": [{"type": "not-icontains", "value": "yes"}]},
    ],
}


def answers(table: dict[str, str]) -> Reply:
    def answer(body: Any) -> str:
        text = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        return next(a for k, a in table.items() if k in text)

    return Reply(answer)


GOOD = {"say hello": "Hello there!", "refund": "Refunds go through the shop."}
BAD = {"say hello": "Hi.", "refund": "Yes, you get a refund right away."}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server))
    (agents_dir / "bot.evals.yaml").write_text(yaml.safe_dump(SUITE), encoding="utf-8")
    environ = {"DYNAGENT_API_KEYS": USER_KEY, "DYNAGENT_ADMIN_KEYS": ADMIN_KEY}
    config = service_config(agents_dir, state_dir, sessions={"store": "memory"})
    async with running_service(config, environ=environ) as running:
        await running.registry.wait_for(lambda r: r.attachments.get("bot", "evals") is not None)
        yield running


async def dynagent_eval(
    service: RunningService, *args: str, key: str = ADMIN_KEY
) -> tuple[int, str, str]:
    """``dynagent eval bot ARGS`` in a thread (its HTTP client blocks), the service on
    this loop: exit status, stdout, stderr."""
    argv = ["eval", "bot", "--url", service.url, "--api-key", key, *args]
    return await asyncio.to_thread(_captured, argv)


def _captured(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


async def test_a_passing_suite_exits_0_with_a_row_per_case(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [answers(GOOD)] * 2)
    code, out, err = await dynagent_eval(service)
    assert code == 0, (out, err)
    rows = [line.split("│")[1:3] for line in out.splitlines() if line.startswith("│ ")]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["greet", "pass"],
        ["refund", "pass"],
    ]
    assert "PASSED 2 of 2 cases, pass rate 100%, mean score 1.00" in out


async def test_a_failing_suite_exits_1_naming_the_failed_check_and_the_answer(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [answers(BAD)] * 2)
    code, out, err = await dynagent_eval(service, "--concurrency", "1")
    assert code == 1, (out, err)
    assert (
        "✗ greet: 0 of 1 trials passed (needs 100%): icontains: the answer does not contain" in out
    )
    assert "answer: Hi." in out
    assert "answer: Yes, you get a refund right away." in out
    assert "FAILED 2 of 2 cases, pass rate 0%" in out
    assert "2 of 2 cases failed: greet, refund; pass rate 0.0% below 100.0%" in out


async def test_json_prints_the_run_record_and_the_run_is_counted_as_the_clis(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [answers(GOOD)])
    code, out, _ = await dynagent_eval(service, "--json", "--case", "greet")
    record = json.loads(out)
    assert (code, record["state"], record["trigger"], record["total"]) == (0, "passed", "cli", 1)
    assert [case["id"] for case in record["cases"]] == ["greet"]
    stored = await service.client.get(
        f"/v1/agents/bot/evals/{record['id']}", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    assert await stored.json() == record


async def test_compare_shows_each_cases_change_against_the_stable(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    candidate = agent_document("bot", model_server, system="New.", model={"name": CANARY_MODEL})
    service.write_agent(canary_document(candidate, weight=0), filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
    model_server.script(DEFAULT_MODEL, [answers({"say hello": "Hi.", "refund": "No."})] * 2)
    model_server.script(CANARY_MODEL, [answers({"say hello": "Hello!", "refund": "Yes."})] * 2)
    code, out, err = await dynagent_eval(service, "--variant", "canary", "--compare")
    assert code == 1, (out, err)
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in out.splitlines()
        if line.startswith("│ ")
    ]
    assert [[row[0], row[1], row[6], row[7]] for row in rows] == [
        ["greet", "pass", "FAIL 0.00", "fixed"],
        ["refund", "FAIL", "pass 1.00", "regressed"],
    ]
    assert f"bot canary {revision_of(candidate)}" in out


async def test_a_draft_file_is_evaluated(
    service: RunningService, model_server: ScriptedModelServer, tmp_path: Path
) -> None:
    draft = agent_document("bot", model_server, system="Draft.", model={"name": CANARY_MODEL})
    path = tmp_path / "draft.json"
    path.write_text(json.dumps(draft), encoding="utf-8")
    suite = tmp_path / "other.evals.yaml"
    suite.write_text(yaml.safe_dump({"cases": SUITE["cases"][:1]}), encoding="utf-8")
    model_server.script(CANARY_MODEL, [answers(GOOD)])
    code, out, _ = await dynagent_eval(
        service, "--spec", str(path), "--suite", str(suite), "--json"
    )
    record = json.loads(out)
    assert (code, record["variant"], record["revision"]) == (0, "draft", revision_of(draft))


async def test_what_cannot_run_exits_2_saying_why(service: RunningService, tmp_path: Path) -> None:
    code, out, err = await dynagent_eval(service, key=USER_KEY)
    assert (code, out) == (2, "")
    assert err == "error: evaluation runs need an admin API key (forbidden)\n"
    code, _, err = await dynagent_eval(service, "--variant", "canary")
    assert (code, err) == (2, "error: agent 'bot' has no canary to evaluate (conflict)\n")
    code, _, err = await dynagent_eval(service, "--spec", str(tmp_path / "missing.yaml"))
    assert code == 2 and err.startswith("error: cannot read ")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n", encoding="utf-8")
    code, _, err = await dynagent_eval(service, "--suite", str(broken))
    assert code == 2 and err.startswith(f"error: {broken} is not valid YAML")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cases: [{id: a, input: x, assert: [{type: is-json, valu: 1}]}]\n")
    code, _, err = await dynagent_eval(service, "--suite", str(bad))
    assert code == 2 and "valu" in err and "(config_error)" in err


def test_no_service_exits_2() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, out, err = _captured(["eval", "bot", "--url", url])
    assert (code, out) == (2, "")
    assert err.startswith(f"error: cannot reach the service at {url}: ")


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["eval", "bot", "--variant", "canary", "--revision", "abc"])
    assert exited.value.code == 2
