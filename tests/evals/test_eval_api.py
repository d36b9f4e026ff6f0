"""Evaluation runs over HTTP: ``POST /v1/agents/{name}/evals`` (SSE progress, 202 JSON),
read back by id and listed; candidates (stable, canary, kept revision, draft), judges
that score or fail, the comparison with the stable version, and every refusal a 4xx."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.support import DEFAULT_MODEL, Held, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "user-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
USER = {"Authorization": f"Bearer {USER_KEY}"}
STREAM = {**ADMIN, "Accept": "text/event-stream"}
JUDGE_MODEL = "gpt-judge"
CANARY_MODEL = "gpt-canary"
SCORE_SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string"},
    },
    "required": ["score", "reason"],
}
SUITE: dict[str, Any] = {
    "cases": [
        {"id": "greet", "input": "say hello", "assert": [{"type": "icontains", "value": "hello"}]},
        {
            "id": "refund",
            "input": "can I get a refund?",
            "assert": [
                {"type": "not-icontains", "value": "yes"},
                {"type": "llm-rubric", "value": "Never promises a refund", "threshold": 0.7},
            ],
        },
    ],
    "pass": {"min_pass_rate": 1.0},
    "judge": {"agent": "judge-bot"},
}


def user_text(body: Any) -> str:
    return str(next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user"))


def answers(table: dict[str, str]) -> Reply:
    """Answers by the case's input: cases run concurrently, in no fixed order."""
    return Reply(lambda body: next(a for k, a in table.items() if k in user_text(body)))


GOOD = {"say hello": "Hello there!", "refund": "Refunds go through the shop."}
BAD = {"say hello": "Hi.", "refund": "Yes, you get a refund."}


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server))
    judge = agent_document(
        "judge-bot", model_server, model={"name": JUDGE_MODEL}, output={"schema": SCORE_SCHEMA}
    )
    write_agent(agents_dir, judge)
    (agents_dir / "bot.evals.yaml").write_text(yaml.safe_dump(SUITE), encoding="utf-8")
    environ = {"DYNAGENT_API_KEYS": USER_KEY, "DYNAGENT_ADMIN_KEYS": ADMIN_KEY}
    config = service_config(agents_dir, state_dir, sessions={"store": "memory"})
    async with running_service(config, environ=environ) as running:
        await running.registry.wait_for(
            lambda r: "judge-bot" in r and r.attachments.get("bot", "evals") is not None
        )
        yield running


async def stream(service: RunningService, body: dict[str, Any]) -> list[tuple[str, Any]]:
    response = await service.client.post("/v1/agents/bot/evals", json=body, headers=STREAM)
    text = await response.text()
    assert (response.status, response.content_type) == (200, "text/event-stream"), text
    return parse_sse(text)


def shape(case: dict[str, Any]) -> dict[str, Any]:
    """A case result without its measured figures."""
    return {k: v for k, v in case.items() if k not in ("latency_ms", "tokens")}


async def test_a_streamed_run_reports_each_case_then_the_whole_run_kept_by_its_id(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [answers(GOOD)] * 2)
    model_server.script(JUDGE_MODEL, [Reply('{"score": 0.9, "reason": "no promise"}')])
    events = await stream(service, {})
    model_server.assert_complete()
    names = [name for name, _ in events]
    assert names == ["case", "case", "done"]
    progress = sorted((data["id"], data["done"], data["total"]) for _, data in events[:2])
    assert [p[0] for p in progress] == ["greet", "refund"]
    assert sorted(p[1] for p in progress) == [1, 2] and {p[2] for p in progress} == {2}
    record = events[-1][1]
    stable = revision_of(agent_document("bot", model_server))
    judge_revision = service.registry.get("judge-bot").revision
    summary = {k: v for k, v in record.items() if k not in ("cases", "started_at", "finished_at")}
    assert summary == {
        "id": record["id"],
        "agent": "bot",
        "revision": stable,
        "variant": "stable",
        "suite_revision": record["suite_revision"],
        "state": "passed",
        "total": 2,
        "done": 2,
        "passed": True,
        "pass_rate": 1.0,
        "mean_score": 0.975,
        "reason": "0 of 2 cases failed",
        "regressions": [],
        "judge": f"judge-bot@{judge_revision}",
        "judge_tokens": record["judge_tokens"],
        "judge_cost": None,
        "trigger": "api",
        "by": "DYNAGENT_ADMIN_KEYS[0]",
        "stable_run": None,
        "compare": None,
    }
    assert [shape(case) for case in record["cases"]] == [
        {
            "id": "greet",
            "passed": True,
            "score": 1.0,
            "reason": "1 of 1 trials passed",
            "trials": 1,
            "passed_trials": 1,
            "cost": None,
            "answer": "Hello there!",
            "error": None,
            "checks": [{"passed": True, "score": 1.0, "reason": "the answer contains 'hello'"}],
        },
        {
            "id": "refund",
            "passed": True,
            "score": 0.95,
            "reason": "1 of 1 trials passed",
            "trials": 1,
            "passed_trials": 1,
            "cost": None,
            "answer": "Refunds go through the shop.",
            "error": None,
            "checks": [
                {"passed": True, "score": 1.0, "reason": "the answer does not contain 'yes'"},
                {"passed": True, "score": 0.9, "reason": "judged 0.90: no promise"},
            ],
        },
    ]
    again = await service.client.get(f"/v1/agents/bot/evals/{record['id']}", headers=ADMIN)
    assert (again.status, await again.json()) == (200, record)
    listed = await (await service.client.get("/v1/agents/bot/evals", headers=ADMIN)).json()
    assert listed == {"runs": [{k: v for k, v in record.items() if k != "cases"}]}
    metrics = await (await service.client.get("/metrics", headers=ADMIN)).text()
    assert eval_samples(metrics) == {
        ("dynagent_eval_cases_total", "bot", stable, "pass", "api"): 2.0,
        ("dynagent_judge_score_count", "bot", stable, "stable", "suite"): 1.0,
        ("dynagent_judge_score_sum", "bot", stable, "stable", "suite"): 0.9,
    }


def eval_samples(text: str) -> dict[tuple[str, ...], float]:
    found: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "dynagent_eval_cases_total":
                key = (labels["agent"], labels["revision"], labels["verdict"], labels["trigger"])
            elif sample.name in ("dynagent_judge_score_count", "dynagent_judge_score_sum"):
                key = (labels["agent"], labels["revision"], labels["variant"], labels["source"])
            else:
                continue
            found[(sample.name, *key)] = round(sample.value, 6)
    return found


@pytest.mark.parametrize(
    "judge_answer",
    ["not json at all {", '{"score": "high", "reason": "?"}', '{"score": 7, "reason": "?"}'],
)
async def test_a_judge_that_answers_no_score_fails_its_case_with_an_error(
    service: RunningService, model_server: ScriptedModelServer, judge_answer: str
) -> None:
    """However the judge's answer is broken (not JSON, no number, out of range), the case
    fails with a clear error: never a passed case."""
    model_server.script(DEFAULT_MODEL, [answers(GOOD)])
    model_server.script(JUDGE_MODEL, [Reply(judge_answer)], cycle=True)
    record = (await stream(service, {"cases": ["refund"]}))[-1][1]
    (case,) = record["cases"]
    assert (record["state"], record["passed"], case["passed"]) == ("failed", False, False)
    assert case["error"].startswith("judge error: "), case
    assert case["checks"][1] == {"passed": False, "score": 0.0, "reason": case["error"]}
    metrics = await (await service.client.get("/metrics", headers=ADMIN)).text()
    stable = record["revision"]
    assert eval_samples(metrics) == {
        ("dynagent_eval_cases_total", "bot", stable, "error", "api"): 1.0
    }


async def test_a_compare_run_shows_each_case_against_the_stable_and_flags_regressions(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    candidate = agent_document(
        "bot", model_server, system="Candidate.", model={"name": CANARY_MODEL}
    )
    service.write_agent(canary_document(candidate, weight=0), filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
    model_server.script(DEFAULT_MODEL, [answers(GOOD)] * 2)
    model_server.script(CANARY_MODEL, [answers(BAD)] * 2)
    model_server.script(JUDGE_MODEL, [Reply('{"score": 0.9, "reason": "fine"}')], cycle=True)
    suite = {**SUITE, "pass": {"min_pass_rate": 0, "no_regressions": True}}
    events = await stream(service, {"variant": "canary", "compare": True, "suite": suite})
    model_server.assert_complete()
    assert [name for name, _ in events] == ["case"] * 4 + ["done"]
    assert [data["variant"] for _, data in events[:2]] == ["stable", "stable"]
    assert [data["done"] for _, data in events[:4]] == [1, 2, 3, 4]
    record = events[-1][1]
    stable_revision = service.registry.get("bot").revision
    assert (record["variant"], record["revision"]) == ("canary", revision_of(candidate))
    assert (record["state"], record["regressions"]) == ("failed", ["greet", "refund"])
    assert record["compare"] == {
        "stable_run": record["stable_run"],
        "stable_revision": stable_revision,
        "cases": [
            {
                "id": "greet",
                "stable_passed": True,
                "stable_score": 1.0,
                "passed": False,
                "score": 0.0,
                "change": "regressed",
            },
            {
                "id": "refund",
                "stable_passed": True,
                "stable_score": 0.95,
                "passed": False,
                "score": 0.45,
                "change": "regressed",
            },
        ],
    }


async def test_a_pairwise_check_compares_with_the_reference_or_the_stables_answer(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    """``reference`` in the case, or, without one, the stable version's answer of the same
    run; the judge sees both answers."""
    candidate = agent_document(
        "bot", model_server, system="Candidate.", model={"name": CANARY_MODEL}
    )
    service.write_agent(canary_document(candidate, weight=0), filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
    pairwise = [{"type": "pairwise", "value": "Be brief", "threshold": 0.6}]
    suite = {
        "cases": [
            {
                "id": "given",
                "input": "say hello",
                "reference": "Hello, friend.",
                "assert": pairwise,
            },
            {"id": "live", "input": "refund", "assert": pairwise},
        ],
        "judge": {"agent": "judge-bot"},
    }
    model_server.script(DEFAULT_MODEL, [answers(GOOD)] * 2)
    model_server.script(CANARY_MODEL, [answers(BAD)] * 2)
    # The stable's "given" answer is judged against the case's reference; its "live"
    # answer is the reference itself; the candidate's two answers are judged.
    model_server.script(JUDGE_MODEL, [Reply('{"score": 0.5, "reason": "worse"}')] * 3)
    events = await stream(service, {"variant": "canary", "compare": True, "suite": suite})
    model_server.assert_complete()
    record = events[-1][1]
    prompts = [user_text(body) for body in model_server.requests_for(JUDGE_MODEL)]
    compared = sorted(
        (reference, answer)
        for prompt in prompts
        for reference in ("Hello, friend.", "Refunds go through the shop.")
        for answer in ("Hello there!", "Hi.", "Yes, you get a refund.")
        if f"Reference answer (the version in service now):\n{reference}" in prompt
        and f"Candidate answer (the new version):\n{answer}" in prompt
        and "Rubric:\nBe brief" in prompt
    )
    assert compared == [
        ("Hello, friend.", "Hello there!"),
        ("Hello, friend.", "Hi."),
        ("Refunds go through the shop.", "Yes, you get a refund."),
    ]
    stable = {data["id"]: data["checks"][0]["reason"] for _, data in events[:2]}
    assert stable == {
        "given": "judged 0.50: worse",
        "live": "this run is the reference: nothing to compare with",
    }
    assert [(c["id"], c["passed"], c["score"]) for c in record["cases"]] == [
        ("given", False, 0.5),
        ("live", False, 0.5),
    ]


async def test_a_pairwise_check_without_any_reference_is_an_error_not_a_pass(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    candidate = agent_document(
        "bot", model_server, system="Candidate.", model={"name": CANARY_MODEL}
    )
    service.write_agent(canary_document(candidate, weight=0), filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
    suite = {
        "cases": [{"id": "live", "input": "refund", "assert": [{"type": "pairwise"}]}],
        "judge": {"agent": "judge-bot"},
    }
    model_server.script(CANARY_MODEL, [answers(BAD)])
    record = (await stream(service, {"variant": "canary", "suite": suite}))[-1][1]
    assert (record["state"], record["cases"][0]["error"]) == (
        "failed",
        "no reference answer: give the case a reference, or run it with the stable version "
        "(compare)",
    )


async def test_a_draft_document_runs_without_ever_being_served(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    draft = agent_document("bot", model_server, system="Draft.", model={"name": CANARY_MODEL})
    model_server.script(CANARY_MODEL, [answers(GOOD)])
    response = await service.client.post(
        "/v1/agents/bot/evals", json={"spec": draft, "cases": ["greet"]}, headers=ADMIN
    )
    started = await response.json()
    assert (response.status, started["state"], started["variant"]) == (202, "running", "draft")
    assert started["revision"] == revision_of(draft)
    handle = service_evals(service).get("bot", started["id"])
    assert handle is not None and handle.task is not None
    await handle.task
    record = await (
        await service.client.get(f"/v1/agents/bot/evals/{started['id']}", headers=ADMIN)
    ).json()
    assert (record["state"], record["cases"][0]["answer"]) == ("passed", "Hello there!")
    assert service.registry.get("bot").revision != revision_of(draft)
    assert all(r.revision != revision_of(draft) for r in service.registry.history("bot"))


def service_evals(service: RunningService) -> Any:
    from dynagent.http.state import SERVICE

    return service.app[SERVICE].evals


async def test_an_old_revision_kept_in_the_history_can_be_evaluated(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    old = revision_of(agent_document("bot", model_server))
    newer = agent_document("bot", model_server, system="Newer.")
    service.write_agent(newer)
    await service.wait_serving("bot", revision_of(newer))
    model_server.script(DEFAULT_MODEL, [answers(GOOD)])
    record = (await stream(service, {"revision": old, "cases": ["greet"]}))[-1][1]
    assert (record["variant"], record["revision"], record["state"]) == ("revision", old, "passed")


BAD_BODIES: dict[str, tuple[Any, str]] = {
    "an unknown field": ({"varient": "canary"}, "varient"),
    "two candidates": ({"variant": "canary", "revision": "abc"}, "give one of"),
    "an unknown variant": ({"variant": "shadow"}, "variant"),
    "a concurrency of 0": ({"concurrency": 0}, "concurrency"),
    "a concurrency past 64": ({"concurrency": 65}, "concurrency"),
    "no case listed": ({"cases": []}, "cases"),
    "an unknown case": ({"cases": ["greet", "nope"]}, "the suite has no case 'nope'"),
    "a case id past 128 characters": ({"cases": ["x" * 100_000]}, "at most 128 characters"),
    "a spec of another agent": (
        {"spec": {"name": "other", "model": {"provider": "test"}, "prompt": {"system": "x"}}},
        "not 'bot'",
    ),
    "a spec with an unknown field": (
        {
            "spec": {
                "name": "bot",
                "model": {"provider": "test"},
                "prompt": {"system": "x"},
                "temprature": 1,
            }
        },
        "temprature",
    ),
    "a spec that does not build": (
        {
            "spec": {
                "name": "bot",
                "model": {"provider": "test"},
                "prompt": {"system": "x"},
                "tools": ["no_such_tool"],
            }
        },
        "no_such_tool",
    ),
    "a suite with an unknown field": (
        {
            "suite": {
                "cases": [{"id": "a", "input": "x", "assert": [{"type": "is-json", "valu": 1}]}]
            }
        },
        "valu",
    ),
    "a suite that is not a mapping": ({"suite": ["a"]}, "suite"),
    "a body that is a list": ([], "JSON object"),
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
async def test_a_bad_body_is_a_400_naming_what_is_wrong(
    service: RunningService, body: tuple[Any, str]
) -> None:
    sent, named = body
    response = await service.client.post("/v1/agents/bot/evals", json=sent, headers=ADMIN)
    answer = await response.json()
    assert response.status == 400, answer
    assert named in json.dumps(answer), answer


async def test_refusals_are_4xx_json_errors(service: RunningService) -> None:
    async def status(method: str, path: str, body: Any = None, **headers: str) -> tuple[int, str]:
        response = await service.client.request(
            method, path, json=body, headers={**ADMIN, **headers}
        )
        return response.status, (await response.json())["error"]["type"]

    assert await status("POST", "/v1/agents/bot/evals", {}, Authorization=f"Bearer {USER_KEY}") == (
        403,
        "forbidden",
    )
    assert await status("GET", "/v1/agents/bot/evals", Authorization=f"Bearer {USER_KEY}") == (
        403,
        "forbidden",
    )
    assert await status("POST", "/v1/agents/bot/evals", {}, Authorization="Bearer nope") == (
        401,
        "unauthorized",
    )
    assert await status("POST", "/v1/agents/nobody/evals", {}) == (404, "not_found")
    assert await status("GET", "/v1/agents/nobody/evals") == (404, "not_found")
    assert await status("GET", "/v1/agents/bot/evals/0123456789abcdef") == (404, "not_found")
    assert await status("POST", "/v1/agents/bot/evals", {"revision": "f" * 12}) == (
        404,
        "not_found",
    )
    assert await status("POST", "/v1/agents/bot/evals", {"variant": "canary"}) == (409, "conflict")
    assert await status("POST", "/v1/agents/judge-bot/evals", {}) == (409, "conflict")
    assert await status("POST", "/v1/agents/bot/evals", {"compare": True}) == (409, "conflict")
    no_judge = {
        "cases": [{"id": "a", "input": "x", "assert": [{"type": "llm-rubric", "value": "ok"}]}],
        "judge": {"agent": "ghost"},
    }
    assert await status("POST", "/v1/agents/bot/evals", {"suite": no_judge}) == (409, "conflict")
    unscored = {**no_judge, "judge": {"agent": "bot"}}  # bot has no output schema
    assert await status("POST", "/v1/agents/bot/evals", {"suite": unscored}) == (409, "conflict")
    assert service_evals(service).list("bot") == []


async def test_a_run_cut_short_by_the_service_stopping_ends_with_its_reason(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    (agents_dir / "bot.evals.yaml").write_text(
        yaml.safe_dump({"cases": SUITE["cases"][:1]}), encoding="utf-8"
    )
    released = asyncio.Event()
    model_server.script(DEFAULT_MODEL, [Held(released, Reply("Hello"))])
    config = service_config(agents_dir, state_dir, sessions={"store": "memory"})
    async with running_service(config) as running:
        await running.registry.wait_for(lambda r: r.attachments.get("bot", "evals") is not None)
        started = await (await running.client.post("/v1/agents/bot/evals", json={})).json()
        await model_server.wait_for_requests(1)
        handle = service_evals(running).get("bot", started["id"])
    released.set()
    assert handle is not None and handle.finished
    record = handle.events[-1][1]
    assert (record["state"], record["reason"], record["done"]) == (
        "error",
        "the evaluation was cancelled: the service is stopping",
        0,
    )
