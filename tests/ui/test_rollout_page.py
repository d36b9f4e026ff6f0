"""A canary's rollout on the operations page, in Debian's Chromium against the real service:
its analysis (every check's figures, interval and verdict, live), the trail of its
decisions and the last ended rollout's, a hold by its gate or a waiting approval, and an
agent view that a live update leaves in place (the button under the pointer, the focus).
Every text the service hands over — a reason, a note — is shown as text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Locator, Page, expect

from dynagent.registry.canary import picks_canary
from dynagent.registry.facade import AgentRegistry
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import RunningService, agent_document, running_service, service_config

from .browser import ops_page

ADMIN_KEY = "ui-rollout-admin-key-aaaaaaaaaaaaaaa"
LIVE = 2000
"""Milliseconds the page has to show a change the service already applied."""
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
"""A reason or a note as a person or a failing server may write it: shown, never run."""
DASH, MINUS = "\u2013", "\u2212"
"""What the page writes for no figure, and the sign of minus infinity."""
NO_GUARD = {"max_error_rate": 1.0, "max_latency_ratio": 1000}
"""The fixed-threshold guard out of the way: the analysis decides."""
STABLE = agent_document("bot", system="Stable.")
CANDIDATE = agent_document("bot", system="Candidate.")


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    """The service with an admin key and ``bot``'s stable version; each test adds a canary."""
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={"DYNAGENT_ADMIN_KEYS": ADMIN_KEY}) as running:
        running.write_agent(STABLE)
        await running.registry.wait_for(lambda r: "bot" in r)
        yield running


async def start_canary(service: RunningService, weight: float, **rollout: Any) -> None:
    service.write_agent(
        canary_document(CANDIDATE, weight, guard=NO_GUARD, **rollout),
        filename=canary_filename("bot"),
    )
    revision = canary_revision(CANDIDATE)
    await service.registry.wait_for(
        lambda r: (c := r.entry("bot").canary) is not None and c.agent.revision == revision
    )


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


async def invoke(service: RunningService, variant: str, count: int, weight: float) -> None:
    """``count`` runs routed to ``variant`` (by their routing key, as a caller's would be)."""
    keys = (f"caller-{i}" for i in range(10_000))
    chosen = [k for k in keys if picks_canary("bot", k, weight) == (variant == "canary")]
    for key in chosen[:count]:
        response = await service.client.post(
            "/v1/agents/bot/invoke",
            json={"input": "hi"},
            headers={**admin(), "X-Canary-Key": key},
        )
        assert response.status == 200, await response.text()
        assert (await response.json())["variant"] == variant


async def nothing_ran(page: Page) -> None:
    assert await page.evaluate("window.pwned") is None
    assert await page.locator("#view img, #view script").count() == 0


def shown(value: Any) -> str:
    """A figure as the page writes it: whole numbers as they are, others to four
    significant digits, never in exponent notation."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return DASH if value is None else str(value)
    rounded = float(f"{value:.4g}")
    return str(int(rounded)) if rounded.is_integer() else format(Decimal(repr(rounded)), "f")


def check_row(check: dict[str, Any]) -> list[str]:
    """What the checks table shows for one check of the status: name, verdict, figures,
    interval, reason."""
    figures = " · ".join(f"{k}={shown(v)}" for k, v in check["figures"].items())
    low_high = check["interval"]
    interval = DASH
    if low_high is not None:  # an open end of the band is None
        low, high = (
            (f"{MINUS}∞" if low_high[0] is None else shown(low_high[0])),
            ("∞" if low_high[1] is None else shown(low_high[1])),
        )
        interval = f"[{low}, {high}]"
    return [check["name"], check["verdict"], figures, interval, check["reason"]]


async def table_rows(rows: Locator) -> list[list[str]]:
    return [
        [cell.strip() for cell in await row.locator("td").all_inner_texts()]
        for row in await rows.all()
    ]


async def test_the_analysis_panel_shows_each_checks_figures_interval_and_verdict(
    service: RunningService,
) -> None:
    analysis = {"interval": 0.2, "min_requests": 3, "max_inconclusive": 100_000}
    await start_canary(service, 50, analysis=analysis)
    await invoke(service, "canary", 4, 50)
    await invoke(service, "stable", 4, 50)

    def counted(registry: AgentRegistry) -> bool:
        checks = registry.status("bot").get("analysis", {}).get("checks", [])
        figures: dict[str, Any] = next(
            (c["figures"] for c in checks if c["name"] == "error_rate"), {}
        )
        return (figures.get("canary_requests"), figures.get("stable_requests")) == (4, 4)

    await service.registry.wait_for(counted)  # the checks are made on every interval
    status = service.registry.status("bot")["analysis"]
    assert {c["name"] for c in status["checks"]} == {"error_rate", "latency_p95", "sample_ratio"}
    latency = next(c for c in status["checks"] if c["name"] == "latency_p95")
    assert latency["interval"][1] is None  # four latencies: the band's top is open
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-analysis") as ui:
        await ui.open("#/agent/bot")
        await expect(ui.page.locator("#live")).to_have_text("live")  # the feed parses
        panel = ui.page.locator("#analysis-panel")
        await expect(panel.locator("h2 .badge")).to_have_text(status["verdict"])
        await expect(panel.locator(".analysis-source")).to_have_text("this replica's figures")
        await expect(panel.locator(".analysis-note")).to_have_text(status["note"])
        await expect(panel.locator(".analysis-inconclusive")).to_contain_text(" of 100000")
        await expect(panel.locator(".analysis-meta time")).to_have_count(1)
        rows = panel.locator("table.checks-table tbody tr")
        await expect(rows).to_have_count(len(status["checks"]))
        assert await table_rows(rows) == [check_row(c) for c in status["checks"]]
        for check in status["checks"]:
            verdict = {"pass": "ok", "fail": "bad", "inconclusive": "warn"}[check["verdict"]]
            badge = panel.locator(f'tr[data-check="{check["name"]}"] .badge')
            await expect(badge).to_have_class(f"badge {verdict}")


async def test_the_analysis_panel_follows_each_check_live_and_shows_a_hostile_note_as_text(
    service: RunningService,
) -> None:
    """Prometheus out of reach: every check is inconclusive with a note, while no request
    moves the traffic; the page follows the count as the checks are made. The note quotes
    the configured address, markup and all."""
    url = f"http://127.0.0.1:9/{HOSTILE}"
    analysis = {
        "prometheus": {"url": url, "timeout": 1},
        "interval": 0.2,
        "max_inconclusive": 100_000,
    }
    await start_canary(service, 10, analysis=analysis)
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-analysis-held") as ui:
        await ui.open("#/agent/bot")
        panel = ui.page.locator("#analysis-panel")
        await expect(panel.locator("h2 .badge")).to_have_text("inconclusive")
        await expect(panel.locator(".analysis-source")).to_have_text(
            "Prometheus (the fleet's figures)"
        )
        await expect(panel.locator(".analysis-note")).to_contain_text(f"Prometheus at {url}: ")
        await expect(panel).to_contain_text("No check has figures yet.")
        first = int((await panel.locator(".analysis-inconclusive").inner_text()).split()[0])
        await ui.page.wait_for_function(
            "n => parseInt(document.querySelector('.analysis-inconclusive').textContent) >= n",
            arg=first + 3,
            timeout=10_000,
        )
        assert service.registry.entry("bot").canary.policy.weight == 10  # type: ignore[union-attr]
        await nothing_ran(ui.page)


async def test_the_history_panel_lists_each_decision_newest_first_and_the_ended_rollout(
    service: RunningService,
) -> None:
    await start_canary(service, 10, steps=[10, 50], step_after={"requests": 1})
    await invoke(service, "canary", 1, 10)
    await service.registry.wait_for(lambda r: r.entry("bot").canary.policy.weight == 50)  # type: ignore[union-attr]
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-rollout-history") as ui:
        await ui.open("#/agent/bot")
        trail = ui.page.locator('#history-panel table[data-trail="canary"] tbody tr')
        await expect(trail).to_have_count(1)
        assert (await table_rows(trail))[0][1:] == ["rollout", "step", "10 → 50", ""]
        # Decisions made while the page is open show up at the top, as they are made.
        paused = await service.client.post(
            "/v1/agents/bot/rollout/pause", json={"reason": HOSTILE}, headers=admin()
        )
        assert paused.status == 200, await paused.text()
        await expect(trail).to_have_count(2, timeout=LIVE)
        resumed = await service.client.post("/v1/agents/bot/rollout/resume", headers=admin())
        assert resumed.status == 200, await resumed.text()
        await expect(trail).to_have_count(3, timeout=LIVE)
        history = await (
            await service.client.get("/v1/agents/bot/rollout/history", headers=admin())
        ).json()
        entries = history["canary"]["entries"]
        assert [e["action"] for e in entries] == ["step", "pause", "resume"]
        await expect_trail(trail, entries)
        await expect(trail.nth(1).locator("td.reason")).to_have_text(HOSTILE)
        await nothing_ran(ui.page)

        promoted = await service.client.post("/v1/agents/bot/promote", headers=admin())
        assert promoted.status == 200, await promoted.text()
        ended = ui.page.locator('#history-panel table[data-trail="ended"] tbody tr')
        await expect(ended).to_have_count(3, timeout=LIVE)
        await expect(ui.page.locator('#history-panel table[data-trail="canary"]')).to_have_count(0)
        heading = ui.page.locator("#history-panel h3")
        await expect(heading).to_contain_text(f"Last ended rollout {canary_revision(CANDIDATE)}")
        await expect(heading).to_contain_text("promoted")
        await expect_trail(ended, entries)
        await nothing_ran(ui.page)


async def expect_trail(rows: Locator, entries: list[dict[str, Any]]) -> None:
    """The rows are ``entries`` newest first: when (the same instant), by, action, from →
    to, reason."""

    def cells(entry: dict[str, Any]) -> list[str]:
        moved = f"{shown(entry.get('from'))} → {shown(entry.get('to'))}"
        moved = moved if "from" in entry or "to" in entry else ""
        return [entry["by"], entry["action"], moved, entry.get("reason", "")]

    newest_first = list(reversed(entries))
    assert [row[1:] for row in await table_rows(rows)] == [cells(e) for e in newest_first]
    stamps = [await row.locator("time").get_attribute("datetime") for row in await rows.all()]
    assert [datetime.fromisoformat(str(s).replace("Z", "+00:00")) for s in stamps] == [
        datetime.fromisoformat(e["at"]) for e in newest_first
    ]


async def test_a_live_update_leaves_the_agent_views_buttons_and_focus_in_place(
    service: RunningService,
) -> None:
    """Traffic redraws the figures; the Pause button (a click may be on its way to it)
    stays the same element and keeps the focus."""
    await start_canary(service, 50)
    async with ops_page(service.url, key=ADMIN_KEY) as ui:
        await ui.open("#/agent/bot")
        await expect(ui.page.locator("#pause")).to_have_text("Pause rollout")
        await ui.page.evaluate(
            "window.held = document.getElementById('pause'); window.held.focus()"
        )
        await invoke(service, "canary", 2, 50)
        await invoke(service, "stable", 1, 50)
        traffic = ui.page.locator("#agent table.small-table").first  # the variants' runs
        for variant, runs in (("canary", "2"), ("stable", "1")):
            row = traffic.locator("tbody tr", has_text=variant)
            await expect(row.locator("td").nth(1)).to_have_text(runs, timeout=LIVE)
        kept = await ui.page.evaluate(
            "({same: document.getElementById('pause') === window.held,"
            " focused: document.activeElement === window.held})"
        )
        assert kept == {"same": True, "focused": True}


async def test_a_canary_held_by_its_gate_or_waiting_for_approval_says_so(
    service: RunningService,
) -> None:
    """Its gate pending (no suite yet), the canary takes none of its weight though its
    state is ``serving``: "held", never "guard ok". A step that waits for approval is
    flagged beside a healthy guard."""
    other = agent_document("slow", system="Stable.")
    service.write_agent(other)
    candidate = agent_document("slow", system="Candidate.")
    approval = {"steps": [10, 50], "step_after": {"requests": 1}, "approval": {"before_weight": 50}}
    service.write_agent(
        canary_document(candidate, 10, **approval), filename=canary_filename("slow")
    )
    await start_canary(service, 50, gate={})
    await service.registry.wait_for(lambda r: "slow" in r and r.entry("slow").canary is not None)
    status = service.registry.status("bot")["canary"]
    assert (status["state"], status["gate"]["state"]) == ("serving", "pending")
    async with ops_page(service.url, key=ADMIN_KEY, shot="agents-held") as ui:
        await ui.open("#/agents")
        held = ui.page.locator('tr[data-agent="bot"] .canary-cell')
        await expect(held.locator(".badge")).to_have_text(["held", "gate pending"])
        waiting = ui.page.locator('tr[data-agent="slow"] .canary-cell')
        await expect(waiting.locator(".badge")).to_have_text(["guard ok", "awaiting approval"])
        await ui.go("#/agent/bot")
        panel = ui.page.locator("#canary-panel")
        await expect(panel.locator(".badge").first).to_have_text("held")
        await expect(panel.locator("#canary-gate")).to_contain_text("no live traffic")
        await ui.go("#/agent/slow")
        await expect(ui.page.locator("#canary-panel .approval")).to_contain_text(
            "dynagent rollout approve slow"
        )
