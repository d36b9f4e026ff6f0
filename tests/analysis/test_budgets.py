"""``rollout.budget``: a canary whose revision spent its budget — US dollars of its model
calls (``models.prices``) or tokens, per rollout or per UTC day — is paused fleet-wide,
from a real Prometheus scraping the service or from this replica's own figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.registry.canary import load_canary
from dynagent.registry.facade import AgentRegistry
from tests.notifications.test_webhooks import Receiver
from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.prometheus import prometheus
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

PRICES = {"m-canary": {"input": 2.0, "output": 8.0}}
NO_GUARD = {"max_error_rate": 1.0, "max_latency_ratio": 1000}
QUIET_ANALYSIS = {
    "interval": 3600,
    "latency": None,
    "sample_ratio": False,
    "min_requests": 1_000_000,
    "max_inconclusive": 100_000,
}
"""An analysis that only names the Prometheus the budget reads, and never decides."""


async def start_canary(
    service: RunningService, server: ScriptedModelServer, **rollout: Any
) -> dict[str, Any]:
    stable = agent_document("bot", server, system="Stable.", model={"name": "m-stable"})
    candidate = agent_document("bot", server, system="Canary.", model={"name": "m-canary"})
    service.write_agent(stable)
    await service.wait_serving("bot", revision_of(stable))
    service.write_agent(
        canary_document(candidate, 10, guard=NO_GUARD, **rollout),
        filename=canary_filename("bot"),
    )
    revision = canary_revision(candidate)
    await service.registry.wait_for(
        lambda r: (c := r.entry("bot").canary) is not None and c.agent.revision == revision
    )
    return candidate


async def on_canary(service: RunningService) -> dict[str, Any]:
    """One run pinned to the canary; its answer."""
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Agent-Variant": "canary"}
    )
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    assert body["variant"] == "canary"
    return body


def budget_shows(spent_tokens: int) -> Any:
    def done(registry: AgentRegistry) -> bool:
        canary = registry.status("bot")["canary"]
        budget = canary.get("budget") if canary else None
        return budget is not None and budget["spent_tokens"] >= spent_tokens

    return done


def paused_by_budget(registry: AgentRegistry) -> bool:
    canary = registry.entry("bot").canary
    return canary is not None and canary.policy.paused is not None


def limit_of(kind: str, run: dict[str, Any]) -> float:
    """A budget that two runs like ``run`` stay within and a third passes."""
    spend = run["usage"]["cost_usd"] if kind == "usd" else run["usage"]["total_tokens"]
    assert spend > 0
    return 2.5 * float(spend) if kind == "usd" else int(2.5 * spend)


@pytest.mark.parametrize(
    ("kind", "per"), [("usd", "rollout"), ("tokens", "day"), ("usd", "day"), ("tokens", "rollout")]
)
async def test_this_replicas_spend_pauses_a_canary_past_its_budget(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, kind: str, per: str
) -> None:
    model_server.script("m-canary", [Reply("from the canary")] * 3)
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        await check_budget_pause(service, model_server, kind, per, "replica", analysis=None)


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "per"), [("usd", "rollout"), ("tokens", "day")])
async def test_the_fleets_spend_in_prometheus_pauses_a_canary_past_its_budget(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
    kind: str,
    per: str,
) -> None:
    model_server.script("m-canary", [Reply("from the canary")] * 3)
    config = service_config(
        agents_dir, state_dir, models={"prices": PRICES}, metrics={"public": True}
    )
    async with running_service(config, environ={}) as service:
        port = service.client.port
        async with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"]) as url:
            analysis = {**QUIET_ANALYSIS, "prometheus": {"url": url}}
            await check_budget_pause(service, model_server, kind, per, "prometheus", analysis)


async def check_budget_pause(
    service: RunningService,
    server: ScriptedModelServer,
    kind: str,
    per: str,
    source: str,
    analysis: dict[str, Any] | None,
) -> None:
    # The limit is known once a run has shown what one costs: the canary starts with a
    # budget no run can pass, and the real one is written over it (a rollout edit).
    rollout: dict[str, Any] = {"analysis": analysis} if analysis else {}
    huge = {kind: 1e9 if kind == "usd" else 10**12, "per": per, "interval": 0.2}
    candidate = await start_canary(service, server, budget=huge, **rollout)
    first = await on_canary(service)
    limit = limit_of(kind, first)
    await service.registry.wait_for(budget_shows(first["usage"]["total_tokens"]), within=60)
    budget = {kind: limit, "per": per, "interval": 0.2}
    service.write_agent(
        canary_document(candidate, 10, guard=NO_GUARD, budget=budget, **rollout),
        filename=canary_filename("bot"),
    )
    await service.registry.wait_for(
        lambda r: (
            (c := r.entry("bot").canary) is not None
            and c.policy.budget is not None
            and c.policy.budget.model_dump()[kind] == limit
        )
    )
    tokens = first["usage"]["total_tokens"]
    await on_canary(service)
    await service.registry.wait_for(budget_shows(2 * tokens), within=60)
    within = service.registry.status("bot")["canary"]["budget"]
    assert not paused_by_budget(service.registry)
    await on_canary(service)
    await service.registry.wait_for(paused_by_budget, within=60)
    canary = service.registry.entry("bot").canary
    status = service.registry.status("bot")["canary"]

    def spent_usd(runs: int) -> float:
        return round(runs * float(first["usage"]["cost_usd"]), 8)

    assert {k: v for k, v in within.items() if k not in ("since", "checked_at")} == {
        kind: limit,
        "per": per,
        "spent_usd": pytest.approx(spent_usd(2)),
        "spent_tokens": 2 * tokens,
        "source": source,
        "exceeded": False,
        "note": None
        if source == "prometheus"
        else ("no Prometheus in rollout.analysis: this replica's spend"),
    }
    assert canary is not None and canary.policy.paused is not None
    paused = canary.policy.paused
    assert paused.by == "budget"
    figure = (
        f"${spent_usd(3):.6f} of its ${limit:g} budget"
        if kind == "usd"
        else f"{3 * tokens} tokens of its {int(limit)} token budget"
    )
    assert paused.reason.startswith(
        f"budget: canary revision {canary.agent.revision} spent {figure} per {per} (since "
    )
    assert paused.reason.endswith(f"{source} figures)")
    last = canary.policy.history[-1].model_dump()
    assert (last["by"], last["action"], last["reason"]) == ("budget", "pause", paused.reason)
    assert status["budget"]["exceeded"] is True
    assert status["budget"]["spent_tokens"] == 3 * tokens
    assert status["state"] == "pulled"


async def test_a_budget_in_dollars_on_a_model_without_a_price_shows_it_and_never_pauses(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    model_server.script("m-canary", [Reply("from the canary")])
    config = service_config(agents_dir, state_dir)  # no prices
    async with running_service(config, environ={}) as service:
        await start_canary(service, model_server, budget={"usd": 1e-12, "interval": 0.1})
        run = await on_canary(service)
        await service.registry.wait_for(budget_shows(run["usage"]["total_tokens"]), within=60)
        budget = service.registry.status("bot")["canary"]["budget"]
        paused = paused_by_budget(service.registry)

    assert "cost_usd" not in run["usage"]
    assert (budget["spent_usd"], budget["exceeded"], paused) == (None, False, False)
    assert budget["note"] == (
        "a model of the canary has no price in models.prices: no cost to judge"
    )


@pytest.mark.parametrize(
    ("budget", "issues"),
    [
        (
            "{usd: 1, tokens: 100}",
            [("rollout.budget", "Value error, give exactly one of usd and tokens")],
        ),
        ("{per: day}", [("rollout.budget", "Value error, give exactly one of usd and tokens")]),
        ("{usd: -1}", [("rollout.budget.usd", "Input should be greater than 0")]),
        ("{usd: .inf}", [("rollout.budget.usd", "Input should be a finite number")]),
        (
            "{tokens: 1.5}",
            [
                (
                    "rollout.budget.tokens",
                    "Input should be a valid integer, got a number with a fractional part",
                )
            ],
        ),
        ("{usd: 1, per: week}", [("rollout.budget.per", "Input should be 'rollout' or 'day'")]),
        ("{usd: 1, every: 5}", [("rollout.budget.every", "Extra inputs are not permitted")]),
    ],
)
def test_a_bad_budget_names_its_field(budget: str, issues: list[tuple[str, str]]) -> None:
    text = (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\n"
        f"rollout: {{weight: 10, budget: {budget}}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_canary(text, source="bot.canary.yaml")
    assert caught.value.reason == "invalid rollout"
    assert list(caught.value.issues) == [FieldIssue(path, message) for path, message in issues]


async def test_a_budget_pause_reaches_the_pause_webhook_with_its_figures(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    hooks = Receiver()
    app = web.Application()
    app.router.add_post("/hook", hooks.handle)
    receiver = TestServer(app)
    await receiver.start_server()
    model_server.script("m-canary", [Reply("from the canary")])
    hook = {"url": str(receiver.make_url("/hook")), "events": ["pause"]}
    config = service_config(
        agents_dir, state_dir, models={"prices": PRICES}, notifications={"webhooks": [hook]}
    )
    try:
        async with running_service(config, environ={}) as service:
            await start_canary(service, model_server, budget={"tokens": 1, "interval": 0.1})
            await on_canary(service)
            await hooks.wait(1)
            canary = service.registry.entry("bot").canary
    finally:
        await receiver.close()

    assert canary is not None and canary.policy.paused is not None
    (notice,) = hooks.notices()
    assert (notice["event"], notice["agent"], notice["revision"], notice["by"]) == (
        "pause",
        "bot",
        canary.agent.revision,
        "budget",
    )
    assert notice["reason"] == canary.policy.paused.reason
    assert " token budget per rollout (since " in notice["reason"]


async def test_an_unreachable_prometheus_leaves_the_budget_on_this_replicas_spend(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    model_server.script("m-canary", [Reply("from the canary")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    analysis = {**QUIET_ANALYSIS, "prometheus": {"url": "http://127.0.0.1:9", "timeout": 1}}
    async with running_service(config, environ={}) as service:
        await start_canary(
            service, model_server, analysis=analysis, budget={"tokens": 1, "interval": 0.1}
        )
        note = await paused_on_this_replicas_spend(service)

    assert note.startswith("Prometheus at http://127.0.0.1:9: ")
    assert note.endswith("; this replica's spend meanwhile")


async def paused_on_this_replicas_spend(service: RunningService) -> str:
    """One canary run, then the budget's pause, judged on this replica's own figures;
    the budget's note (why those figures)."""
    await on_canary(service)
    await service.registry.wait_for(paused_by_budget, within=60)
    canary = service.registry.entry("bot").canary
    budget = service.registry.status("bot")["canary"]["budget"]
    assert canary is not None and canary.policy.paused is not None
    assert canary.policy.paused.reason.endswith("replica figures)")
    assert budget["source"] == "replica"
    note: str = budget["note"]
    return note
