"""Online scores (``rollout.judge``): a judge agent on the scripted model scores sampled live
runs of both variants after they have answered; the guard compares the canary's mean with
the stable's. The judge's answers are scripted per variant (from the answer it is shown)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dynagent.core.service import Service
from dynagent.http.state import SERVICE
from dynagent.registry.canary import picks_canary
from dynagent.registry.judged import JudgedScores, judge_verdict
from tests.support import DEFAULT_MODEL, Held, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

CANARY_MODEL = "gpt-canary"
JUDGE_MODEL = "gpt-judge"
RUBRIC = "The answer is helpful and correct."


def judged_by_variant(stable: float, canary: float) -> Callable[[dict[str, Any]], str]:
    """A judge that gives the stable's answers one score and the canary's another."""

    def score(body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        assert RUBRIC in prompt and "the question" in prompt
        value = canary if "canary answer" in prompt else stable
        return f'{{"score": {value}, "reason": "scripted"}}'

    return score


def stable(server: ScriptedModelServer) -> dict[str, Any]:
    return agent_document("bot", server, system="Stable.", model={"retries": 0})


def setup(server: ScriptedModelServer, folder: Path, **rollout: Any) -> dict[str, Any]:
    """``bot`` (stable answers "stable answer"), its canary ("canary answer") at 50 % by
    ``X-Canary-Key``, and ``judge-bot``; returns the canary document."""
    judge = {"sample": 1, "rubric": RUBRIC, "agent": "judge-bot", **rollout.pop("judge", {})}
    write_agent(folder, stable(server))
    write_agent(
        folder, agent_document("judge-bot", server, model={"name": JUDGE_MODEL, "retries": 0})
    )
    canary = canary_document(
        agent_document("bot", server, system="Canary.", model={"name": CANARY_MODEL}),
        50,
        sticky_key="header",
        judge=judge,
        **rollout,
    )
    write_agent(folder, canary, filename=canary_filename("bot"))
    server.script(DEFAULT_MODEL, [Reply("stable answer")], cycle=True)
    server.script(CANARY_MODEL, [Reply("canary answer")], cycle=True)
    return canary


def keys(variant: str, count: int) -> list[str]:
    """Caller keys the router sends to ``variant`` (canary weight 50)."""
    wanted = variant == "canary"
    found = (f"k{i}" for i in range(10_000) if picks_canary("bot", f"k{i}", 50) == wanted)
    return [next(found) for _ in range(count)]


async def ask(service: RunningService, key: str) -> dict[str, Any]:
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "the question"}, headers={"X-Canary-Key": key}
    )
    body: dict[str, Any] = await response.json()
    assert response.status == 200, body
    return body


def core(service: RunningService) -> Service:
    return service.app[SERVICE]


async def judged_status(service: RunningService) -> dict[str, Any]:
    response = await service.client.get("/v1/agents/bot")
    body = await response.json()
    assert response.status == 200, body
    judge: dict[str, Any] = body["canary"]["judge"]
    return judge


def online_samples(text: str) -> dict[tuple[str, ...], float]:
    """Of ``bot``: judged runs by (variant, outcome), score counts by (variant, revision,
    source)."""
    found: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("agent") != "bot":
                continue
            if sample.name == "dynagent_online_judged_total":
                found[sample.name, labels["variant"], labels["outcome"]] = sample.value
            elif sample.name == "dynagent_judge_score_count":
                key = (sample.name, labels["variant"], labels["revision"], labels["source"])
                found[key] = sample.value
    return found


async def test_a_canary_judged_worse_than_the_stable_by_more_than_max_score_drop_is_paused(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    canary = setup(model_server, agents_dir, guard={"max_score_drop": 0.2, "min_judged": 3})
    stable_revision = revision_of(stable(model_server))
    model_server.script(JUDGE_MODEL, [Reply(judged_by_variant(0.9, 0.4))] * 6)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for key in keys("stable", 3) + keys("canary", 3):
            await ask(service, key)
        await core(service).judging.idle()
        reason = (
            "judged score 0.40 over 3 canary runs is 0.50 below the stable's 0.90 over 3 runs "
            "(max_score_drop 0.2)"
        )
        status = service.registry.status("bot")["canary"]
        assert (status["state"], status["pulled"]["reason"], status["pulled"]["by"]) == (
            "pulled",
            reason,
            "guard",
        )
        assert await judged_status(service) == {
            "agent": "judge-bot",
            "sample": 1.0,
            "stable": {"count": 3, "mean": 0.9, "errors": 0, "skipped": 0},
            "canary": {"count": 3, "mean": 0.4, "errors": 0, "skipped": 0},
        }
        # Written back like every guard pull: the fleet follows, a restart keeps it.
        registry = service.registry
        await registry.wait_for(lambda r: r.status("bot")["canary"]["pulled"]["recorded"])
        document = yaml.safe_load((agents_dir / canary_filename("bot")).read_text())
        paused = document["rollout"]["paused"]
        assert (paused["reason"], paused["by"], paused["revision"]) == (
            reason,
            "guard",
            canary_revision(canary),
        )
        metrics = online_samples(await (await service.client.get("/metrics")).text())
        assert metrics == {
            ("dynagent_judge_score_count", "canary", canary_revision(canary), "online"): 3,
            ("dynagent_judge_score_count", "stable", stable_revision, "online"): 3,
            ("dynagent_online_judged_total", "canary", "scored"): 3,
            ("dynagent_online_judged_total", "stable", "scored"): 3,
        }


async def test_a_canary_judged_as_good_as_the_stable_keeps_serving(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    setup(
        model_server,
        agents_dir,
        guard={"max_score_drop": 0.2, "min_judge_score": 0.5, "min_judged": 3},
    )
    model_server.script(JUDGE_MODEL, [Reply(judged_by_variant(0.8, 0.8))] * 8)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for key in keys("stable", 4) + keys("canary", 4):
            await ask(service, key)
        await core(service).judging.idle()
        assert service.registry.status("bot")["canary"]["pulled"] is None
        assert await judged_status(service) == {
            "agent": "judge-bot",
            "sample": 1.0,
            "stable": {"count": 4, "mean": 0.8, "errors": 0, "skipped": 0},
            "canary": {"count": 4, "mean": 0.8, "errors": 0, "skipped": 0},
        }


async def test_sampling_never_delays_the_caller_the_answer_comes_before_the_judges(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    setup(model_server, agents_dir)
    released = asyncio.Event()
    model_server.script(JUDGE_MODEL, [Held(released, Reply('{"score": 1, "reason": "ok"}'))])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        body = await ask(service, keys("stable", 1)[0])
        assert (body["output"], body["variant"]) == ("stable answer", "stable")
        # The caller has its answer; the judge has the run and has not answered yet.
        async with asyncio.timeout(60):
            await model_server.wait_for_requests(2)
        assert len(model_server.requests_for(JUDGE_MODEL)) == 1
        assert (await judged_status(service))["stable"]["count"] == 0
        released.set()
        await core(service).judging.idle()
        assert (await judged_status(service))["stable"] == {
            "count": 1,
            "mean": 1.0,
            "errors": 0,
            "skipped": 0,
        }


async def test_a_full_judge_queue_skips_sampled_runs_and_counts_them(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    setup(model_server, agents_dir, judge={"queue": 1, "concurrency": 1})
    released = asyncio.Event()
    model_server.script(JUDGE_MODEL, [Held(released, Reply('{"score": 0.5}'))])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for key in keys("stable", 3):  # the first is in judgement: the queue is full
            await ask(service, key)
        assert (await judged_status(service))["stable"] == {
            "count": 0,
            "mean": None,
            "errors": 0,
            "skipped": 2,
        }
        released.set()
        await core(service).judging.idle()
        assert (await judged_status(service))["stable"]["count"] == 1


async def test_pinned_runs_are_not_sampled_a_pinning_caller_picks_what_it_measures(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    setup(model_server, agents_dir)  # the judge's model has no script: a call would fail
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for variant in ("stable", "canary"):
            response = await service.client.post(
                "/v1/agents/bot/invoke",
                json={"input": "the question"},
                headers={"X-Agent-Variant": variant},
            )
            assert response.status == 200, await response.text()
        await core(service).judging.idle()
        nothing = {"count": 0, "mean": None, "errors": 0, "skipped": 0}
        assert await judged_status(service) == {
            "agent": "judge-bot",
            "sample": 1.0,
            "stable": nothing,
            "canary": nothing,
        }
        assert model_server.requests_for(JUDGE_MODEL) == []


@pytest.mark.parametrize(
    "answer",
    ["this is not JSON", '{"score": 1.7}', '{"reason": "no score"}', '["score", 1]'],
)
async def test_a_judge_answer_that_is_no_score_counts_as_an_error_not_a_score(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, answer: str
) -> None:
    setup(model_server, agents_dir, guard={"min_judge_score": 0.5, "min_judged": 1})
    model_server.script(JUDGE_MODEL, [Reply(answer)] * 2)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for key in keys("stable", 1) + keys("canary", 1):
            await ask(service, key)
        await core(service).judging.idle()
        nothing = {"count": 0, "mean": None, "errors": 1, "skipped": 0}
        assert await judged_status(service) == {
            "agent": "judge-bot",
            "sample": 1.0,
            "stable": nothing,
            "canary": nothing,
        }
        assert service.registry.status("bot")["canary"]["pulled"] is None
        metrics = online_samples(await (await service.client.get("/metrics")).text())
        assert metrics == {
            ("dynagent_online_judged_total", "canary", "error"): 1,
            ("dynagent_online_judged_total", "stable", "error"): 1,
        }


def scores(*values: float) -> JudgedScores:
    judged = JudgedScores()
    for value in values:
        judged.add(value)
    return judged


@pytest.mark.parametrize(
    ("stable", "canary", "verdict"),
    [
        (scores(), scores(0.1, 0.1), None),  # too few canary scores to judge
        (
            scores(),
            scores(0.1, 0.1, 0.1),
            "judged score 0.10 over the last 3 scored runs is below 0.5",
        ),
        (scores(0.9, 0.9), scores(0.6, 0.6, 0.6), None),  # too few stable scores to compare
        (scores(0.9, 0.9, 0.9), scores(0.7, 0.7, 0.7), None),  # a drop of 0.2 is the limit
        (
            scores(0.9, 0.9, 0.9),
            scores(0.6, 0.6, 0.6),
            "judged score 0.60 over 3 canary runs is 0.30 below the stable's 0.90 over 3 runs "
            "(max_score_drop 0.2)",
        ),
    ],
)
def test_the_judged_verdict_needs_enough_scores_of_each_variant(
    stable: JudgedScores, canary: JudgedScores, verdict: str | None
) -> None:
    found = judge_verdict(min_score=0.5, max_drop=0.2, min_judged=3, stable=stable, canary=canary)
    assert found == verdict
