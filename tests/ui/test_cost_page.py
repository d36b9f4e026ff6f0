"""What runs cost and what a canary may spend, on the operations page in Debian's Chromium
against the real service and the scripted model: ``models.prices`` gives a run its cost
(the traces list's column, a run's view), an unpriced model's run shows none, and a
canary's ``rollout.budget`` shows in its panel — within it, and exceeded (paused)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from dynagent.registry.facade import AgentRegistry
from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import RunningService, agent_document, running_service, service_config

from .browser import ops_page

ADMIN_KEY = "ui-cost-admin-key-aaaaaaaaaaaaaaaaaa"
LIVE = 2000
"""Milliseconds the page has to show a change the service already applied."""
PRICED, FREE = "priced-model", "free-model"
PRICES = {PRICED: {"input": 1000.0, "output": 2000.0}}
"""US dollars per million tokens: dear enough that one short run costs cents."""
DASH = "\u2013"
"""What the page writes for no figure."""


def usd(x: float) -> str:
    """A cost as the page writes it: cents from a dollar up, three significant digits
    below, never in exponent notation."""
    if x == 0:
        return "$0"
    if abs(x) < 0.000001:
        return "< $0.000001"
    if abs(x) >= 1:
        return f"${x:,.2f}"
    return "$" + format(Decimal(repr(float(f"{x:.3g}"))), "f")


def bot(server: ScriptedModelServer, name: str, model: str, system: str) -> dict[str, Any]:
    return agent_document(name, server, system=system, model={"name": model})


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    """``bot`` (priced, with a canary on a large budget), ``free`` (no price) and
    ``spender`` (priced, its canary on a budget of one token a day)."""
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={"DYNAGENT_ADMIN_KEYS": ADMIN_KEY}) as running:
        large = {"usd": 1000, "per": "rollout", "interval": 0.1}
        tiny = {"tokens": 1, "per": "day", "interval": 0.1}
        for name, budget in (("bot", large), ("spender", tiny)):
            running.write_agent(bot(model_server, name, PRICED, "Stable."))
            candidate = bot(model_server, name, PRICED, "Candidate.")
            running.write_agent(
                canary_document(candidate, 100 if name == "spender" else 50, budget=budget),
                filename=canary_filename(name),
            )
        running.write_agent(bot(model_server, "free", FREE, "Stable."))
        await running.registry.wait_for(
            lambda r: (
                all(n in r for n in ("bot", "free", "spender"))
                and all(r.entry(n).canary is not None for n in ("bot", "spender"))
            )
        )
        yield running


async def run(service: RunningService, name: str, variant: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    if variant is not None:
        headers["X-Agent-Variant"] = variant
    response = await service.client.post(
        f"/v1/agents/{name}/invoke", json={"input": "what does it cost?"}, headers=headers
    )
    assert response.status == 200, await response.text()
    body: dict[str, Any] = await response.json()
    return body


async def test_a_runs_cost_shows_in_the_traces_list_and_its_view(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(PRICED, [Reply("priced answer")])
    model_server.script(FREE, [Reply("free answer")])
    priced = await run(service, "bot", "stable")
    free = await run(service, "free")
    listed = await service.client.get(
        "/v1/traces", headers={"Authorization": f"Bearer {ADMIN_KEY}"}
    )
    summaries = {t["trace_id"]: t for t in (await listed.json())["traces"]}
    usage = summaries[priced["trace_id"]]["usage"]
    cost = (usage["input_tokens"] * 1000 + usage["output_tokens"] * 2000) / 1_000_000
    assert summaries[priced["trace_id"]]["cost_usd"] == pytest.approx(cost)
    assert summaries[free["trace_id"]]["cost_usd"] is None
    async with ops_page(service.url, key=ADMIN_KEY, shot="traces-cost") as ui:
        await ui.open("#/traces")
        cell = ui.page.locator(f'tr[data-trace="{priced["trace_id"]}"] td.cost')
        await expect(cell).to_have_text(usd(summaries[priced["trace_id"]]["cost_usd"]))
        unpriced = ui.page.locator(f'tr[data-trace="{free["trace_id"]}"] td.cost')
        await expect(unpriced).to_have_text(DASH)
        await ui.go(f"#/trace/{priced['trace_id']}")
        await expect(ui.page.locator(".run-cost")).to_have_text(usd(cost))
        await ui.go(f"#/trace/{free['trace_id']}")
        await expect(ui.page.locator("#trace .badge").first).to_have_text("ok")
        await expect(ui.page.locator(".run-cost")).to_have_count(0)


def spent(name: str, exceeded: bool) -> Any:
    def done(registry: AgentRegistry) -> bool:
        budget = (registry.status(name).get("canary") or {}).get("budget") or {}
        return budget.get("spent_tokens", 0) > 0 and budget.get("exceeded") is exceeded

    return done


async def test_a_canarys_budget_shows_in_its_panel_within_it_and_exceeded(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script(PRICED, [Reply("priced answer")] * 2)
    await run(service, "bot", "canary")
    await run(service, "spender")  # at 100 %: the canary, past its one token
    await service.registry.wait_for(spent("bot", exceeded=False))
    await service.registry.wait_for(spent("spender", exceeded=True))
    await service.registry.wait_for(
        lambda r: (c := r.entry("spender").canary) is not None and c.pulled is not None
    )
    within = service.registry.status("bot")["canary"]["budget"]
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-budget") as ui:
        await ui.open("#/agents")
        flagged = ui.page.locator('tr[data-agent="spender"] .canary-cell .badge')
        await expect(flagged).to_contain_text(["pulled", "over budget"])
        await expect(ui.page.locator('tr[data-agent="bot"] .canary-cell')).not_to_contain_text(
            "over budget"
        )
        await ui.go("#/agent/bot")
        box = ui.page.locator("#canary-budget .budget")
        await expect(box).to_have_class("ok-box budget")
        await expect(box.locator(".badge")).to_have_text("within")
        await expect(box.locator(".budget-limit")).to_have_text("$1,000.00 per rollout")
        await expect(box.locator(".budget-spent")).to_have_text(
            f"{usd(within['spent_usd'])} · {within['spent_tokens']} tokens"
        )
        await expect(box.locator(".budget-source")).to_have_text("this replica's spend")
        await ui.go("#/agent/spender")
        box = ui.page.locator("#canary-budget .budget")
        await expect(box).to_have_class("error-box budget")
        await expect(box.locator(".badge")).to_have_text("exceeded")
        await expect(box.locator(".budget-limit")).to_have_text("1 token per day (UTC)")
        pulled = ui.page.locator("#canary-panel .error-box", has_text="Pulled by budget")
        await expect(pulled).to_contain_text("budget")
