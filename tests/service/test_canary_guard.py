"""The guard against a real failing or slow canary model (the scripted server through the real
``openai`` client), and the two variants' figures side by side in ``/metrics`` and the status."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from loguru import logger
from prometheus_client.parser import text_string_to_metric_families

from dynagent.registry.canary import picks_canary
from dynagent.registry.entry import Canary
from dynagent.registry.facade import AgentRegistry
from tests.support import DEFAULT_MODEL, Fail, Reply, ScriptedModelServer, Slow
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


def documents(server: ScriptedModelServer, **rollout: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """``bot`` on the main model, and a canary of it on ``gpt-canary``; no model retries."""
    stable = agent_document("bot", server, system="Stable.", model={"retries": 0})
    canary = agent_document(
        "bot", server, system="Canary.", model={"name": CANARY_MODEL, "retries": 0}
    )
    return stable, canary_document(canary, **rollout)


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """Every WARNING (and worse) line logged during the test."""
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(m.record["message"]), level="WARNING")
    yield lines
    logger.remove(sink)


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    """The service on ``agents_dir``; the test writes the files before entering."""
    async with running_service(service_config(agents_dir, state_dir)) as running:
        yield running


async def call(service: RunningService, key: str, **headers: str) -> tuple[int, str, Any]:
    """Invoke ``bot`` as caller ``key``: status, the variant that served (from the trace for
    a failed run), the body."""
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key, **headers}
    )
    body = await response.json()
    if response.status == 200:
        return 200, body["variant"], body
    trace = await service.client.get(f"/v1/traces/{body['error']['trace_id']}")
    return response.status, (await trace.json())["variant"], body


def first_canary_keys(count: int, weight: float, start: int = 0) -> tuple[list[str], int]:
    """Keys ``caller-{start}…``, up to and including the ``count``-th that picks the canary."""
    keys, picked = [], 0
    for i in range(start, start + 10_000):
        keys.append(f"caller-{i}")
        picked += picks_canary("bot", keys[-1], weight)
        if picked == count:
            return keys, i + 1
    raise AssertionError("no such keys")


def recorded(canary: Canary) -> bool:
    return canary.pulled is not None and canary.pulled.recorded


def canary_of(registry: AgentRegistry) -> Canary:
    canary = registry.entry("bot").canary
    assert canary is not None
    return canary


def without_times(canary: dict[str, Any]) -> dict[str, Any]:
    assert isinstance(canary.pop("loaded_at"), float)
    if canary["pulled"] is not None:
        assert isinstance(canary["pulled"].pop("at"), float)
    return canary


async def test_the_guard_pulls_a_failing_canary_and_the_stable_answers_everyone(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, warnings: list[str]
) -> None:
    guard = {"min_requests": 5}
    stable, canary = documents(model_server, weight=50, guard=guard)
    write_agent(agents_dir, stable)
    canary_path = write_agent(agents_dir, canary, filename=canary_filename("bot")).resolve()
    model_server.script(DEFAULT_MODEL, [Reply("stable answer")], cycle=True)
    model_server.script(CANARY_MODEL, [Fail(500)] * 5)  # a sixth canary request would be an error
    async with running_service(service_config(agents_dir, state_dir)) as service:
        keys, next_key = first_canary_keys(5, 50)
        before = time.time()
        answers = [await call(service, key) for key in keys]
        after = time.time()
        # Before the pull only the canary's requests failed; the stable answered all of its own.
        expected = [
            (502, "canary") if picks_canary("bot", k, 50) else (200, "stable") for k in keys
        ]
        assert [(status, variant) for status, variant, _ in answers] == expected
        assert {b["error"]["type"] for s, _, b in answers if s != 200} == {"model_error"}

        status = service.registry.status("bot")
        pulled_at = status["canary"]["pulled"]["at"]
        assert before <= pulled_at <= after
        reason = "error rate 100% over the last 5 requests exceeds 20%"
        assert without_times(status["canary"]) == {
            "revision": canary_revision(canary),
            "weight": 50.0,
            "sticky_key": "auto",
            "state": "pulled",
            "pulled": {"reason": reason, "by": "guard", "recorded": False},
            "source": {"kind": "file", "location": str(canary_path)},
            "guard": {
                "max_error_rate": 0.2,
                "min_requests": 5,
                "max_latency_ratio": 3.0,
                "latency_floor_ms": 50.0,
                "window": 200,
                "min_feedback_score": None,
                "min_feedback": 10,
                "min_judge_score": None,
                "max_score_drop": None,
                "min_judged": 20,
            },
            "steps": None,
        }
        assert (
            f"guard pulled canary {canary_revision(canary)} of agent bot out of traffic: "
            + (reason)
            in warnings
        )

        # After the pull: every unpinned request, the canary's callers too, gets the stable.
        after_pull = [await call(service, f"caller-{i}") for i in range(next_key, next_key + 40)]
        assert {(s, v) for s, v, _ in after_pull} == {(200, "stable")}
        traffic = status_traffic(service)
        assert traffic == {
            "stable": {"requests": len(keys) - 5 + 40, "errors": 0, "recent_error_rate": 0.0},
            "canary": {"requests": 5, "errors": 5, "recent_error_rate": 1.0},
        }

        # The pull is written into the canary's file, which the service then reads back.
        await service.registry.wait_for(lambda r: recorded(canary_of(r)))
        on_disk = yaml.safe_load(canary_path.read_text())
        (pull,) = on_disk["rollout"].pop("history")  # the decision, in the trail too
        assert (pull["action"], pull["by"]) == ("pause", "guard")
        paused = on_disk["rollout"]["paused"]
        at = datetime.fromisoformat(paused["at"]) if isinstance(paused["at"], str) else paused["at"]
        assert abs(at.timestamp() - pulled_at) < 0.001
        assert on_disk == canary_document(
            canary,
            weight=50,
            guard=guard,
            paused={
                "reason": reason,
                "at": paused["at"],
                "by": "guard",
                "revision": canary_revision(canary),
            },
        )
        assert service.registry.status("bot")["canary"]["pulled"]["recorded"] is True

        # Republishing the same revision with the pause kept (the weight changed) stays pulled.
        reweighted = canary_document(canary, weight=60, guard=guard, paused=paused)
        write_agent(agents_dir, reweighted, filename=canary_filename("bot"))
        await service.registry.wait_for(lambda r: canary_of(r).policy.weight == 60)
        assert service.registry.status("bot")["canary"]["state"] == "pulled"
        assert (await call(service, keys[-1]))[:2] == (200, "stable")

        # A new revision does: serving again, its figures start from zero.
        fixed = {
            **canary,
            "model": {**canary["model"], "name": "gpt-canary-2"},
            "rollout": {"weight": 60, "guard": guard},
        }
        fixed_keys, _ = first_canary_keys(3, 60, start=1000)
        model_server.script("gpt-canary-2", [Reply("canary answer")] * 3)
        write_agent(agents_dir, fixed, filename=canary_filename("bot"))
        await service.registry.wait_for(
            lambda r: canary_of(r).agent.revision == canary_revision(fixed)
        )
        fresh = service.registry.status("bot")
        assert (fresh["canary"]["state"], fresh["canary"]["pulled"]) == ("serving", None)
        assert status_traffic(service)["canary"] == {
            "requests": 0,
            "errors": 0,
            "recent_error_rate": 0.0,
        }
        served = [await call(service, key) for key in fixed_keys]
        assert [(s, v, b["output"]) for s, v, b in served] == [
            (200, "canary", "canary answer")
            if picks_canary("bot", k, 60)
            else (200, "stable", "stable answer")
            for k in fixed_keys
        ]


async def test_the_guard_pulls_a_canary_much_slower_than_the_stable(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable, canary = documents(model_server, weight=50, guard={"min_requests": 3})
    write_agent(agents_dir, stable)
    write_agent(agents_dir, canary, filename=canary_filename("bot"))
    model_server.script(DEFAULT_MODEL, [Reply("fast")], cycle=True)
    model_server.script(CANARY_MODEL, [Slow(0.6, Reply("slow"))] * 3)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for i in range(3):  # the stable's own figures first, so the guard can compare
            assert (await call(service, f"warm-{i}", **{"X-Agent-Variant": "stable"}))[0] == 200
        keys, next_key = first_canary_keys(3, 50)
        answers = [await call(service, key) for key in keys]
        assert {s for s, _, _ in answers} == {200}  # slow, not failing
        canary_state = service.registry.status("bot")["canary"]
        assert canary_state["state"] == "pulled"
        reason = canary_state["pulled"]["reason"]
        assert re.fullmatch(r"p95 latency 6\d\d ms exceeds 3x the stable \d+ ms", reason), reason

        after_pull = [await call(service, f"caller-{i}") for i in range(next_key, next_key + 20)]
        assert {(s, v) for s, v, _ in after_pull} == {(200, "stable")}


async def test_metrics_and_status_show_both_variants_side_by_side(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable, canary = documents(model_server, weight=50)
    write_agent(agents_dir, stable)
    write_agent(agents_dir, canary, filename=canary_filename("bot"))
    keys = [f"caller-{i}" for i in range(30)]
    canary_count = sum(picks_canary("bot", k, 50) for k in keys)
    model_server.script(DEFAULT_MODEL, [Reply("from the stable")] * (30 - canary_count))
    model_server.script(CANARY_MODEL, [Fail(500)] + [Reply("from the canary")] * (canary_count - 1))
    async with running_service(service_config(agents_dir, state_dir)) as service:
        answers = [await call(service, key) for key in keys]
        families = text_string_to_metric_families(
            await (await service.client.get("/metrics")).text()
        )

    tokens: dict[tuple[str, str], float] = {}
    counts: dict[str, int] = {"stable": 0, "canary": 0}
    for status, variant, body in answers:
        counts[variant] += 1
        if status == 200:
            for kind in ("input", "output"):
                key = (variant, kind)
                tokens[key] = tokens.get(key, 0) + body["usage"][f"{kind}_tokens"]
    assert counts == {"stable": 30 - canary_count, "canary": canary_count}
    samples = {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "agent"))): s.value
        for family in families
        for s in family.samples
        if s.labels.get("agent") == "bot"
        and s.name.endswith(("requests_total", "errors_total", "tokens_total", "seconds_count"))
        # by revision, for the rollout analysis: tests/analysis reads them
        and not s.name.startswith("dynagent_rollout_")
    }
    revisions = (revision_of(stable), canary_revision(canary))
    assert revisions[0] != revisions[1]
    expected: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {
        **{
            (
                "dynagent_requests_total",
                (("endpoint", "invoke"), ("outcome", outcome), ("variant", v)),
            ): n
            for v, outcome, n in [
                ("stable", "ok", counts["stable"]),
                ("canary", "ok", counts["canary"] - 1),
                ("canary", "error", 1),
            ]
        },
        ("dynagent_errors_total", (("type", "model_error"), ("variant", "canary"))): 1,
        **{
            ("dynagent_request_duration_seconds_count", (("variant", v),)): n
            for v, n in counts.items()
        },
        **{
            ("dynagent_tokens_total", (("kind", kind), ("variant", v))): n
            for (v, kind), n in tokens.items()
        },
        **{  # by revision too, for rollout.budget
            ("dynagent_revision_tokens_total", (("revision", r), ("variant", v))): sum(
                n for (variant, _), n in tokens.items() if variant == v
            )
            for r, v in zip(revisions, ("stable", "canary"), strict=True)
        },
    }
    assert samples == expected
    assert all(n > 0 for n in tokens.values())


def status_traffic(service: RunningService) -> dict[str, Any]:
    """The status' ``traffic``, latency percentiles checked and taken out."""
    traffic: dict[str, Any] = service.registry.status("bot")["traffic"]
    for figures in traffic.values():
        for key in ("p50_ms", "p95_ms"):
            value = figures.pop(key)
            assert value is None or value >= 0
        assert (figures.pop("ratings"), figures.pop("recent_mean_score")) == (0, None)
        assert figures.pop("unmatched") == 0  # no rollout.match here
    return traffic


async def test_a_paused_canary_stays_paused_after_a_restart_until_resumed(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    stable, canary = documents(model_server, weight=100)
    paused = {"reason": "too many errors", "at": "2026-01-02T03:04:05+00:00", "by": "guard"}
    write_agent(agents_dir, stable)
    canary_path = write_agent(
        agents_dir,
        canary_document(canary, weight=100, paused=paused),
        filename=canary_filename("bot"),
    )
    model_server.script(DEFAULT_MODEL, [Reply("stable answer")])
    model_server.script(CANARY_MODEL, [Reply("canary answer")])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        status = service.registry.status("bot")["canary"]
        assert (status["state"], status["pulled"]) == (
            "pulled",
            {"reason": "too many errors", "at": 1767323045.0, "by": "guard", "recorded": True},
        )
        assert (await call(service, "anyone"))[:2] == (200, "stable")

        response = await service.client.post("/v1/agents/bot/rollout/resume")
        assert response.status == 200, await response.text()
        assert (await response.json())["canary"]["state"] == "serving"
        resumed = yaml.safe_load(canary_path.read_text())
        (decision,) = resumed["rollout"].pop("history")
        assert (decision["action"], decision["by"]) == ("resume", "operator")
        assert resumed == canary_document(canary, weight=100)
        assert (await call(service, "anyone"))[:2] == (200, "canary")

        again = await service.client.post("/v1/agents/bot/rollout/resume")
        assert (again.status, (await again.json())["error"]["type"]) == (409, "conflict")
