"""The rollout block, sticky buckets, per-variant figures and the guard, and the registry's
canary: routing, pins, observing outcomes, pulling, history."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from dynagent import Agent, AgentBuilder, ConfigError, load_spec
from dynagent.exceptions import FieldIssue, NotFound
from dynagent.registry.canary import (
    Paused,
    RolloutPolicy,
    bucket,
    load_canary,
    picks_canary,
    routing_key,
)
from dynagent.registry.events import (
    AgentSwapped,
    CanaryPaused,
    CanaryPulled,
    CanaryRemoved,
    CanaryResumed,
    CanaryStarted,
    CanaryWeightChanged,
    RegistryEvent,
)
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.guard import GuardPolicy, VariantStats, guard_verdict
from dynagent.registry.table import HISTORY

BUILDER = AgentBuilder()


def agent(system: str, name: str = "bot") -> Agent:
    return BUILDER.build(
        load_spec({"name": name, "model": {"provider": "test"}, "prompt": {"system": system}})
    )


def stats(*outcomes: tuple[bool, float], window: int = 200) -> VariantStats:
    figures = VariantStats(window)
    for ok, seconds in outcomes:
        figures.record(ok, seconds)
    return figures


def test_a_bucket_is_a_pure_function_of_agent_and_key() -> None:
    # Fixed values: every replica, every process, every release must agree on them.
    assert (bucket("bot", "user-1"), bucket("bot", "user-2"), bucket("other", "user-1")) == (
        94.4132,
        38.3937,
        20.9913,
    )


def test_keys_spread_over_the_buckets_in_proportion_to_the_weight() -> None:
    keys = [f"k{i}" for i in range(10_000)]
    shares = {w: sum(picks_canary("bot", k, w) for k in keys) / 100 for w in (0, 5, 20, 50, 100)}
    assert shares == {
        0: 0.0,
        5: pytest.approx(5, abs=1),
        20: 20.4,
        50: pytest.approx(50, abs=1.5),
        100: 100.0,
    }
    assert all(picks_canary("bot", "user-2", 38.4) for _ in range(50))
    assert not any(picks_canary("bot", "user-2", 38.3) for _ in range(50))


def test_without_a_key_each_request_draws_at_random(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("dynagent.registry.canary.random", random.Random(3))
    draws = [picks_canary("bot", None, 20) for _ in range(2000)]
    assert 0.17 <= sum(draws) / 2000 <= 0.23
    assert True in draws[:50] and False in draws[:50]


@pytest.mark.parametrize(
    "sticky,expected",
    [
        ("auto", ["s", "h", "a", None]),
        ("session", ["s", None, None, None]),
        ("header", ["h", "h", None, None]),
        ("api_key", ["a", "a", "a", None]),
        ("none", [None, None, None, None]),
    ],
)
def test_the_routing_key_follows_the_sticky_key(sticky: Any, expected: list[str | None]) -> None:
    callers = [("s", "h", "a"), (None, "h", "a"), (None, None, "a"), (None, "", "")]
    assert [routing_key(sticky, session=s, header=h, api_key=a) for s, h, a in callers] == expected


def test_variant_figures_cover_a_bounded_window_and_keep_totals() -> None:
    figures = stats(*[(True, 0.01 * (i + 1)) for i in range(20)], (False, 5.0), window=10)
    assert figures.summary() == {
        "requests": 21,
        "errors": 1,
        "unmatched": 0,
        "recent_error_rate": 0.1,
        "p50_ms": 160.0,  # of the nine successes still in the window: 0.12 … 0.20 s
        "p95_ms": 200.0,
        "ratings": 0,
        "recent_mean_score": None,
    }
    assert VariantStats().summary() == {
        "requests": 0,
        "errors": 0,
        "unmatched": 0,
        "recent_error_rate": 0.0,
        "p50_ms": None,
        "p95_ms": None,
        "ratings": 0,
        "recent_mean_score": None,
    }


def test_requests_rollout_match_keeps_from_the_canary_are_counted_but_not_compared() -> None:
    figures = stats((True, 0.01), (True, 0.02))
    for _ in range(30):  # callers the canary never serves, failing slowly on the stable
        figures.record(False, 9.0, routed=False, unmatched=True)
    summary = figures.summary()
    assert (summary["requests"], summary["errors"], summary["unmatched"]) == (2, 0, 30)
    assert figures.error_rate() == 0.0
    assert figures.percentile(0.95) == 0.02
    assert figures.routed == 2


GUARD = GuardPolicy(min_requests=5, max_error_rate=0.2, max_latency_ratio=3, latency_floor_ms=5)
FAST = [(True, 0.01)] * 5


@pytest.mark.parametrize(
    "canary,stable,verdict",
    [
        ([(False, 0.01)] * 4, FAST, None),  # too few requests to judge
        ([(True, 0.01)] * 4 + [(False, 0.01)], FAST, None),  # 20% is the limit, not past it
        (
            [(True, 0.01)] * 3 + [(False, 0.01)] * 2,
            FAST,
            "error rate 40% over the last 5 requests exceeds 20%",
        ),
        ([(True, 0.03)] * 5, FAST, None),  # exactly 3x
        ([(True, 0.031)] * 5, FAST, "p95 latency 31 ms exceeds 3x the stable 10 ms"),
        ([(True, 0.5)] * 5, FAST[:4], None),  # the stable has too few requests to compare
        ([(True, 0.015)] * 5, [(True, 0.001)] * 5, None),  # 15x, but under 3x the floor
        ([(True, 0.016)] * 5, [(True, 0.001)] * 5, "p95 latency 16 ms exceeds 3x the stable 1 ms"),
    ],
)
def test_the_guard_verdict(
    canary: list[tuple[bool, float]], stable: list[tuple[bool, float]], verdict: str | None
) -> None:
    assert guard_verdict(GUARD, stats(*stable), stats(*canary)) == verdict


def test_a_canary_document_is_a_spec_plus_its_rollout() -> None:
    text = "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\nrollout: {weight: 12.5}\n"
    spec, policy = load_canary(text, source="bot.canary.yaml")
    assert (spec.name, spec.revision) == ("bot", load_spec(text.partition("rollout")[0]).revision)
    assert policy.model_dump() == {
        "weight": 12.5,
        "sticky_key": "auto",
        "guard": {
            "max_error_rate": 0.2,
            "min_requests": 20,
            "max_latency_ratio": 3.0,
            "latency_floor_ms": 50.0,
            "window": 200,
            "min_feedback_score": None,
            "min_feedback": 10,
            "min_judge_score": None,
            "max_score_drop": None,
            "min_judged": 20,
        },
        "steps": (),
        "step_after": None,
        "step_at": None,
        "auto_promote": False,
        "paused": None,
        "shadow": 0.0,
        "pin_sessions": False,
        "judge": None,
        "analysis": None,
        "match": None,
        "gate": None,
        "gate_record": None,
        "approval": None,
        "approved": None,
        "budget": None,
        "history": (),
    }


@pytest.mark.parametrize(
    "rollout,reason,issues",
    [
        ("", "a canary needs a rollout block", [("rollout", "add e.g. 'rollout: {weight: 10}'")]),
        (
            "rollout: {weight: 150, sticky_key: cookie, guard: {window: 5}, extra: 1}",
            "invalid rollout",
            [
                ("rollout.weight", "Input should be less than or equal to 100"),
                (
                    "rollout.sticky_key",
                    "Input should be 'auto', 'session', 'header', 'api_key' or 'none'",
                ),
                ("rollout.guard.window", "Input should be greater than or equal to 10"),
                ("rollout.extra", "Extra inputs are not permitted"),
            ],
        ),
    ],
)
def test_a_bad_rollout_names_its_fields(
    rollout: str, reason: str, issues: list[tuple[str, str]]
) -> None:
    text = f"name: bot\nmodel: {{provider: test}}\nprompt: {{system: hi}}\n{rollout}\n"
    with pytest.raises(ConfigError) as caught:
        load_canary(text, source="bot.canary.yaml")
    error = caught.value
    assert (error.reason, error.agent, error.source) == (reason, "bot", "bot.canary.yaml")
    assert list(error.issues) == [FieldIssue(path, message) for path, message in issues]


def test_a_canary_takes_its_weight_of_the_keys_and_pins_override() -> None:
    registry = AgentRegistry()
    stable, candidate = agent("Stable."), agent("Candidate.")
    registry.table.put(stable)
    registry.rollouts.put_canary(candidate, RolloutPolicy(weight=30))
    keys = [f"user-{i}" for i in range(1000)]
    routed = [registry.route("bot", key=k) for k in keys]
    assert {a.revision: v for a, v in routed} == {
        stable.revision: "stable",
        candidate.revision: "canary",
    }
    assert sum(v == "canary" for _, v in routed) == sum(bucket("bot", k) < 30 for k in keys)
    assert [registry.route("bot", key=k) for k in keys] == routed  # sticky
    assert {registry.route("bot", key=k, pin="stable") for k in keys} == {(stable, "stable")}
    assert {registry.route("bot", key=k, pin="canary") for k in keys} == {(candidate, "canary")}

    registry.rollouts.remove_canary("bot")
    assert {registry.route("bot", key=k) for k in keys} == {(stable, "stable")}
    with pytest.raises(NotFound, match=r"^agent 'bot' has no canary$"):
        registry.route("bot", pin="canary")


def test_the_guard_pulls_a_failing_canary_until_a_new_revision_arrives() -> None:
    registry = AgentRegistry()
    told: list[RegistryEvent] = []
    registry.listeners.append(told.append)
    stable, failing, fixed = agent("Stable."), agent("Failing."), agent("Fixed.")
    policy = RolloutPolicy(weight=100, guard=GuardPolicy(min_requests=3))
    registry.table.put(stable)
    registry.rollouts.put_canary(failing, policy)
    for _ in range(2):
        registry.rollouts.observe(failing, "canary", ok=False, seconds=0.01)
    assert registry.route("bot", key="k") == (failing, "canary")
    registry.rollouts.observe(failing, "canary", ok=False, seconds=0.01)

    canary = registry.status("bot")["canary"]
    assert (canary["state"], canary["pulled"]["reason"]) == (
        "pulled",
        "error rate 100% over the last 3 requests exceeds 20%",
    )
    assert registry.route("bot", key="k") == (stable, "stable")
    assert registry.route("bot", key="k", pin="canary") == (failing, "canary")  # for debugging
    registry.rollouts.put_canary(failing, policy.model_copy(update={"weight": 50}))  # same revision
    assert registry.status("bot")["canary"]["state"] == "pulled"

    registry.rollouts.put_canary(fixed, policy)
    assert registry.route("bot", key="k") == (fixed, "canary")
    assert registry.status("bot")["traffic"]["canary"]["requests"] == 0
    registry.rollouts.observe(
        failing, "canary", ok=False, seconds=0.01
    )  # a late run of the old one
    assert registry.status("bot")["traffic"]["canary"]["requests"] == 0
    assert told == [
        AgentSwapped("bot", stable.revision, None),
        CanaryStarted("bot", failing.revision, 100),
        CanaryPulled("bot", failing.revision, canary["pulled"]["reason"]),
        CanaryWeightChanged("bot", failing.revision, 50, 100),
        CanaryStarted("bot", fixed.revision, 100),
    ]


def test_a_pause_a_resume_and_the_end_of_a_canary_are_told_as_typed_events() -> None:
    registry = AgentRegistry()
    stable, candidate = agent("Stable."), agent("Candidate.")
    policy = RolloutPolicy(weight=100)
    registry.table.put(stable)
    registry.rollouts.put_canary(candidate, policy)
    told: list[RegistryEvent] = []
    registry.listeners.append(told.append)
    paused = Paused(reason="too slow", at=datetime.now(UTC), by="ops")
    registry.rollouts.put_canary(candidate, policy.model_copy(update={"paused": paused}))
    assert registry.route("bot", key="k") == (stable, "stable")
    registry.rollouts.put_canary(candidate, policy)  # the pause removed from the document
    assert registry.route("bot", key="k") == (candidate, "canary")
    registry.rollouts.remove_canary("bot")
    assert told == [
        CanaryPaused("bot", candidate.revision, "too slow", "ops"),
        CanaryResumed("bot", candidate.revision),
        CanaryRemoved("bot", candidate.revision),
    ]


def test_history_is_newest_first_bounded_and_moves_a_revision_served_again() -> None:
    registry = AgentRegistry()
    versions = [agent(f"Version {i}.") for i in range(HISTORY + 2)]
    for version in versions:
        registry.table.put(version)
    registry.rollouts.put_canary(agent("Candidate."), RolloutPolicy(weight=1))
    registry.table.put(versions[-2])  # a rollback
    listed = [(r["revision"], r["variant"]) for r in registry.status("bot")["revisions"]]
    assert listed == [
        (versions[-2].revision, "stable"),
        (agent("Candidate.").revision, "canary"),
        (versions[-1].revision, "stable"),
        *[(v.revision, "stable") for v in reversed(versions[3:-2])],
    ]
    assert len(listed) == HISTORY
