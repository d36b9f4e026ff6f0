"""The operations page in a real browser (Debian's Chromium, headless) against the real
service on loopback: what ops see, live, and what they can do from it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import expect

from dynagent.config import load_config
from dynagent.http.openapi import openapi_document
from dynagent.registry.canary import picks_canary
from tests.support import CallTools, Fail, Reply, ScriptedModelServer
from tests.support.service import (
    BROKEN_DEFINITIONS,
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

from .browser import ops_page

SAMPLES = Path(__file__).resolve().parents[2] / "config-samples" / "agents"
ADMIN_KEY = "ui-admin-key-aaaaaaaaaaaaaaaaaaaa"
USER_KEY = "ui-user-key-bbbbbbbbbbbbbbbbbbbbb"
"""Limited to ``bot``, no admin."""
LIVE = 2000
"""Milliseconds the page has to show a change the service already applied (the issue's 2 s)."""


def canary_of(name: str, weight: float = 50, **fields: Any) -> dict[str, Any]:
    document = agent_document(name, description="candidate", **fields)
    return {**document, "rollout": {"weight": weight}}


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    """``bot`` (with a canary) and ``other`` on the offline model; an admin key and a key
    limited to ``bot``."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys: [{{name: ops-user, key: {USER_KEY}, agents: [bot]}}]\n")
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    async with running_service(config, environ={"DYNAGENT_ADMIN_KEYS": ADMIN_KEY}) as running:
        running.write_agent(agent_document("bot"))
        running.write_agent(canary_of("bot"), filename="bot.canary.yaml")
        running.write_agent(agent_document("other"))
        await running.registry.wait_for(
            lambda r: "other" in r and "bot" in r and r.entry("bot").canary is not None
        )
        yield running


def routed_to(variant: str, count: int, weight: float = 50) -> list[str]:
    """``X-Canary-Key`` values the router sends to ``variant`` of ``bot`` at ``weight``."""
    keys = (f"caller-{i}" for i in range(1000))
    return [k for k in keys if picks_canary("bot", k, weight) == (variant == "canary")][:count]


def admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


async def test_the_sample_agents_are_listed(tmp_path: Path) -> None:
    """What `make run` serves: the sample config as it is (its stdio MCP server included)."""
    names = sorted(
        yaml.safe_load(path.read_text())["name"]
        for path in SAMPLES.glob("*.yaml")
        if ".canary." not in path.name and ".evals." not in path.name
    )
    environ = {"DYNAGENT_SESSIONS_PATH": str(tmp_path / "sessions.db")}
    config = load_config(SAMPLES.parent / "service.yaml", environ)
    async with running_service(config, environ={}) as running:
        await running.registry.wait_for(
            lambda r: all(n in r and r.entry(n).stable is not None for n in names)
        )
        expected = {e.name: e.stable.revision for e in running.registry if e.stable}
        assert sorted(expected) == names and len(names) >= 3
        async with ops_page(running.url, shot="agents-samples") as ui:
            await ui.open()
            rows = ui.page.locator("#agent-rows tr[data-agent]")
            await expect(rows).to_have_count(len(names))
            shown = {
                await row.get_attribute("data-agent"): await row.locator("td").nth(2).inner_text()
                for row in await rows.all()
            }
            assert shown == expected
            canary = ui.page.locator('tr[data-agent="assistant"] .canary-cell')
            await expect(canary).to_contain_text("10%")
            await expect(canary).to_contain_text("guard ok")
            await expect(ui.page.locator("#live")).to_have_text("live")
            # The MCP sample: its server and state, as GET /v1/mcp/servers reports them.
            await ui.go("#/agent/librarian")
            parts = ui.page.locator("#parts")
            await expect(parts).to_contain_text("stdio server notes")
            await expect(parts.locator("tr", has_text="MCP server")).to_contain_text("stdio:notes")
            # The agent-as-tool sample: the sub-agent and its state; its run nested in the trace.
            await ui.go("#/agent/concierge")
            await expect(parts.locator("tr", has_text="sub-agent")).to_contain_text("serving")
            ran = await running.client.post("/v1/agents/concierge/invoke", json={"input": "hours?"})
            assert ran.status == 200, await ran.text()
            await ui.go(f"#/trace/{(await ran.json())['trace_id']}")
            nested = ui.page.locator(".nested")
            await expect(nested).to_contain_text("librarian")
            await expect(nested.locator(".span.tool").first).to_contain_text("notes_")
            await ui.shot("trace-nested")


LAYOUT = """() => {
  const box = document.querySelector(".scroll");
  const right = (el) => el.getBoundingClientRect().right;
  const row = document.querySelector('tr[data-agent="bot"]');
  return {
    overflow: box.scrollWidth - box.clientWidth,
    beyond: Math.max(...[...document.querySelectorAll("table.agents th")].map(right))
      - document.documentElement.clientWidth,
    spark: right(row.querySelector("svg.spark")) - right(row.lastElementChild),
  };
}"""
"""Pixels the table scrolls sideways, its header reaches past the window, and the
sparkline past its cell: all at most 0 when the table fits."""


@pytest.mark.parametrize("width", [1280, 1366, 1440, 1920])
async def test_the_agents_table_fits_a_laptop_window_whole_sparkline_included(
    service: RunningService, width: int
) -> None:
    for variant in ("stable", "canary"):
        response = await service.client.post(
            "/v1/agents/bot/invoke",
            json={"input": "hi"},
            headers={**admin(), "X-Agent-Variant": variant},
        )
        assert response.status == 200, await response.text()
    async with ops_page(service.url, key=ADMIN_KEY, viewport_width=width) as ui:
        await ui.open()
        spark = ui.page.locator('tr[data-agent="bot"] svg.spark rect.spark-canary')
        await expect(spark).not_to_have_count(0, timeout=LIVE)
        layout = await ui.page.evaluate(LAYOUT)
        await ui.shot(f"agents-{width}px")
    assert {k: max(v, 0) for k, v in layout.items()} == {"overflow": 0, "beyond": 0, "spark": 0}, (
        layout
    )


async def test_a_broken_definition_shows_its_error_and_clears_when_fixed(
    service: RunningService,
) -> None:
    text, _, message = BROKEN_DEFINITIONS["invalid YAML"]
    good = agent_document("bot")
    async with ops_page(service.url, key=ADMIN_KEY) as ui:
        await ui.open()
        cell = ui.page.locator('tr[data-agent="bot"] .error-cell')
        await expect(ui.page.locator('tr[data-agent="bot"]')).to_be_visible()
        await expect(cell).to_have_text("")
        service.write_agent(text, filename="bot.yaml")
        await service.wait_error("bot", message)
        await expect(cell).to_contain_text(message, timeout=LIVE)
        await expect(cell).to_contain_text("line 2, column", timeout=LIVE)
        await expect(ui.page.locator('tr[data-agent="bot"]')).to_have_class("has-error")
        await ui.shot("agents-broken")
        service.write_agent(good)
        await service.registry.wait_for(lambda r: r.entry("bot").last_error is None)
        await expect(cell).to_have_text("", timeout=LIVE)


async def test_traffic_moves_the_canary_numbers(service: RunningService) -> None:
    async with ops_page(service.url, key=ADMIN_KEY, shot="agents-traffic") as ui:
        await ui.open()
        canary = ui.page.locator('tr[data-agent="bot"] td[data-variant="canary"]')
        stable = ui.page.locator('tr[data-agent="bot"] td[data-variant="stable"]')
        await expect(canary).to_contain_text("0 · 0%")
        for variant, count in (("canary", 3), ("stable", 2)):
            for key in routed_to(variant, count):  # routed: the figures the guard judges
                response = await service.client.post(
                    "/v1/agents/bot/invoke",
                    json={"input": "hi"},
                    headers={**admin(), "X-Canary-Key": key},
                )
                assert response.status == 200, await response.text()
                assert (await response.json())["variant"] == variant
        await expect(canary).to_contain_text("3 · 0%", timeout=LIVE)
        await expect(stable).to_contain_text("2 · 0%", timeout=LIVE)
        spark = ui.page.locator('tr[data-agent="bot"] svg.spark')
        await expect(spark.locator("rect.spark-stable")).not_to_have_count(0)
        await expect(spark.locator("rect.spark-canary")).not_to_have_count(0)
        await ui.go("#/agent/bot")
        panel = ui.page.locator("#canary-panel")
        await expect(panel.locator("svg.split rect.split-canary")).to_have_count(1)
        await expect(panel.locator("table.guard")).to_contain_text("3")


async def test_promote_from_the_page_changes_what_serves(service: RunningService) -> None:
    entry = service.registry.entry("bot")
    assert entry.canary is not None and entry.stable is not None
    candidate, before = entry.canary.agent.revision, entry.stable.revision
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-promoted") as ui:
        await ui.open("#/agent/bot")
        promote = ui.page.locator("#promote")
        await expect(promote).to_have_text(f"Promote canary {candidate}")
        await promote.click()  # asked first; cancelling changes nothing
        await expect(ui.page.locator("#confirm-text")).to_contain_text(
            f"Promote canary {candidate}"
        )
        await ui.page.locator("#confirm-cancel").click()
        assert service.serving("bot") == before
        await promote.click()
        await ui.page.locator("#confirm-ok").click()
        result = ui.page.locator("#action-result")
        await expect(result).to_have_text(f"Done: bot now serves {candidate}, no canary.")
        assert service.serving("bot") == candidate
        assert service.registry.entry("bot").canary is None
        served = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers=admin()
        )
        assert (served.status, served.headers["X-Agent-Revision"]) == (200, candidate)
        await expect(ui.page.locator("#promote")).to_have_count(0)
        # …and back: roll back to the revision chosen in the list.
        await ui.page.locator("#rollback-to").select_option(before)
        await ui.page.locator("#rollback").click()
        await expect(ui.page.locator("#confirm-text")).to_contain_text(f"back to revision {before}")
        await ui.page.locator("#confirm-ok").click()
        await expect(result).to_have_text(f"Done: bot now serves {before}, no canary.")
        assert service.serving("bot") == before


async def test_roll_back_offers_only_earlier_stable_revisions_never_the_canarys(
    service: RunningService,
) -> None:
    """A rollback restores what served before; the canary's revision (or any revision that
    only ran as a canary) is promotion's business, so the list never offers it."""
    entry = service.registry.entry("bot")
    assert entry.canary is not None and entry.stable is not None
    first, candidate = entry.stable.revision, entry.canary.agent.revision
    second = agent_document("bot", system="Second stable.")
    service.write_agent(second)
    await service.wait_serving("bot", revision_of(second))
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-rollback-list") as ui:
        await ui.open("#/agent/bot")
        options = ui.page.locator("#rollback-to option")
        await expect(options).to_have_count(1)
        assert await ui.page.locator("#rollback-to").input_value() == first
        assert candidate not in await ui.page.locator("#rollback-to").inner_text()
        await ui.page.locator("#rollback").click()
        await expect(ui.page.locator("#confirm-text")).to_contain_text(f"back to revision {first}")
        await ui.page.locator("#confirm-ok").click()
        result = ui.page.locator("#action-result")
        await expect(result).to_have_text(f"Done: bot now serves {first} (canary {candidate}).")
        # Serving the first again, the list offers the second stable one, still not the canary.
        # (Awaited as the page redraws: the list had one option before the rollback too.)
        await expect(ui.page.locator("#rollback-to")).to_have_value(revision_of(second))
        await expect(options).to_have_count(1)
        assert candidate not in await ui.page.locator("#rollback-to").inner_text()


async def test_a_trace_timeline_shows_the_steps_of_a_tool_run(
    agents_dir: Path, state_dir: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script(
        "gpt-main",
        [
            CallTools(
                [
                    ("calculator", {"expression": "17 * 23"}),
                    ("current_time", {"timezone": "Mars/Base"}),
                ]
            ),
            Reply("17 * 23 = 391"),
        ],
    )
    document = agent_document("tooly", model_server, tools=["calculator", "current_time"])
    async with running_service(service_config(agents_dir, state_dir), environ={}) as running:
        running.write_agent(document)
        await running.wait_serving("tooly", revision_of(document))
        response = await running.client.post("/v1/agents/tooly/invoke", json={"input": "17*23?"})
        body = await response.json()
        assert (response.status, body["output"]) == (200, "17 * 23 = 391")
        async with ops_page(running.url, shot="trace") as ui:
            await ui.open("#/traces")
            row = ui.page.locator(f'tr[data-trace="{body["trace_id"]}"]')
            await expect(row).to_contain_text("tooly")
            await row.locator("a").click()
            spans = ui.page.locator(".timeline .span")
            await expect(spans).to_have_count(4)
            labels = [await s.locator(".span-label").inner_text() for s in await spans.all()]
            assert labels == [
                "model gpt-main · step 1",
                "tool calculator",
                "tool current_time",
                "model gpt-main · step 2",
            ]
            kinds = [await s.get_attribute("class") for s in await spans.all()]
            assert kinds == ["span model", "span tool", "span tool error", "span model"]
            calculator = spans.nth(1)
            await calculator.locator("summary").click()
            await expect(calculator.locator("pre").first).to_have_text('{"expression": "17 * 23"}')
            await expect(calculator.locator("pre").nth(1)).to_have_text("391")
            await spans.nth(2).locator("summary").click()
            await expect(spans.nth(2)).to_contain_text("unknown IANA time zone 'Mars/Base'")
            await spans.nth(0).locator("summary").click()
            await expect(spans.nth(0)).to_contain_text("tokens: in")
            await expect(ui.page.locator("main")).to_contain_text("17 * 23 = 391")
            for bar in await ui.page.locator(".span-bar").all():
                box = await bar.bounding_box()
                assert box is not None and box["width"] >= 2
            await ui.shot("trace")


async def test_a_limited_key_sees_only_its_agents(service: RunningService) -> None:
    async with ops_page(service.url, shot="agents-limited") as ui:
        await ui.open()
        await expect(ui.page.locator("#login")).to_be_visible()  # the page asks for a key
        await ui.page.locator("#key").fill(USER_KEY)
        before_login = len(ui.requests)
        await ui.page.locator("#login-form button").click()
        rows = ui.page.locator("#agent-rows tr[data-agent]")
        await expect(rows).to_have_count(1)
        assert await rows.first.get_attribute("data-agent") == "bot"
        await expect(ui.page.locator("#who")).to_contain_text("ops-user")
        await ui.go("#/agent/bot")
        await expect(ui.page.locator("#actions")).to_contain_text("need an admin key")
        await expect(ui.page.locator("#promote, #rollback, #pause, #resume")).to_have_count(0)
        await ui.go("#/agent/other")
        await expect(ui.page.locator("#agent")).to_contain_text("may not call agent 'other'")
        # The key stays in session storage and travels only as a bearer header.
        assert await ui.page.evaluate("document.cookie") == ""
        assert await ui.page.evaluate("sessionStorage.getItem('dynagent.key')") == USER_KEY
        assert not [url for url in ui.requests if USER_KEY in url]
        sent = zip(ui.requests[before_login:], ui.headers[before_login:], strict=True)
        api_calls = [headers for url, headers in sent if "/v1/" in url]
        assert api_calls and all(h.get("authorization") == f"Bearer {USER_KEY}" for h in api_calls)


async def test_no_request_of_the_page_leaves_the_service(service: RunningService) -> None:
    async with ops_page(service.url, key=ADMIN_KEY, shot="traces") as ui:
        await ui.open()
        await expect(ui.page.locator("#agent-rows tr[data-agent]")).to_have_count(2)
        await ui.go("#/agent/bot")
        await expect(ui.page.locator("#parts")).not_to_contain_text("loading")
        await ui.page.locator("#compare").click()
        await expect(ui.page.locator("#diff")).to_contain_text("+++")
        changed = ui.page.locator("#diff .diff-line.add, #diff .diff-line.del")
        await expect(changed).to_contain_text(["description: candidate"])
        await ui.go("#/play?agent=bot")
        await ui.page.locator("#play-input").fill("What is 2 + 2?")
        await ui.page.locator("#play-variant").select_option("canary")
        await ui.page.locator("#play-run").click()
        await expect(ui.page.locator("#play-trace")).to_be_visible()
        await ui.shot("playground")
        types = await ui.page.locator("#play-events li").evaluate_all(
            "els => els.map(e => e.dataset.type)"
        )
        assert types[0] == "run_started" and types[-1] == "run_finished"
        canary = service.registry.entry("bot").canary
        assert canary is not None
        started = ui.page.locator("#play-events li").first
        await expect(started).to_contain_text(f"bot {canary.agent.revision} (canary)")
        await ui.page.locator("#play-trace").click()
        await expect(ui.page.locator(".timeline .span")).not_to_have_count(0)
        await ui.go("#/traces")
        await expect(ui.page.locator("table.traces tbody tr")).to_have_count(1)
        await ui.page.locator('#trace-filter select[name="status"]').select_option("error")
        await ui.page.locator("#trace-filter button").click()
        await expect(ui.page.locator("#traces")).to_have_text("No recent runs match.")
        assert ui.page.url.endswith("#/traces?status=error")
        await ui.page.locator('#trace-filter select[name="variant"]').select_option("canary")
        await ui.page.locator('#trace-filter select[name="status"]').select_option("ok")
        await ui.page.locator("#trace-filter button").click()
        await expect(ui.page.locator("table.traces tbody tr")).to_have_count(1)
        hosts = {url.split("/")[2] for url in ui.requests}
        assert hosts == {service.url.split("/")[2]}
        assert ui.foreign_requests() == []


async def test_a_thousand_agents_are_all_listed_and_filterable(
    state_dir: Path, tmp_path: Path
) -> None:
    """Functional only: the paint time is the bench's (``python -m bench.ui``), printed here."""
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(1000):
        document = agent_document(f"agent-{i:04d}")
        (folder / f"agent-{i:04d}.yaml").write_text(yaml.safe_dump(document))
    async with running_service(service_config(folder, state_dir), environ={}) as running:
        assert len(running.registry) == 1000
        async with ops_page(running.url, shot="agents-1000") as ui:
            await ui.open()
            await ui.page.wait_for_selector("body[data-agents-complete]", state="attached")
            painted = await ui.page.evaluate("Number(document.body.dataset.agentsPainted)")
            print(f"first paint of 1,000 agents: {painted:.0f} ms")
            await expect(ui.page.locator("#agent-rows tr[data-agent]")).to_have_count(1000)
            await ui.page.locator("#filter").fill("agent-09")
            await expect(ui.page.locator("#agent-rows tr[data-agent]")).to_have_count(100)
            await expect(ui.page.locator("#count")).to_have_text("100 of 1000")


async def test_the_agent_view_follows_a_refused_change(service: RunningService) -> None:
    text, _, message = BROKEN_DEFINITIONS["unknown tool"]
    async with ops_page(service.url, key=ADMIN_KEY, shot="agent-refused") as ui:
        await ui.open("#/agent/bot")
        summary = ui.page.locator("#agent .summary")
        await expect(summary).to_contain_text(f"serving {service.serving('bot')}")
        await expect(summary.locator(".error-box")).to_have_count(0)
        service.write_agent(text, filename="bot.yaml")
        await service.wait_error("bot", message)
        await expect(summary.locator(".error-box")).to_contain_text(message, timeout=LIVE)
        await expect(summary).to_contain_text("refused change")


async def test_a_pulled_canary_says_why_and_when_and_resume_shows_only_when_served(
    agents_dir: Path, state_dir: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-canary", [Fail(500)])
    canary = {
        **agent_document("bot", model_server, model={"name": "gpt-canary", "retries": 0}),
        "rollout": {"weight": 50, "guard": {"min_requests": 1, "max_error_rate": 0}},
    }
    async with running_service(service_config(agents_dir, state_dir), environ={}) as running:
        running.write_agent(agent_document("bot"))
        running.write_agent(canary, filename="bot.canary.yaml")
        await running.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        failed = await running.client.post(
            "/v1/agents/bot/invoke",
            json={"input": "hi"},
            headers={"X-Canary-Key": routed_to("canary", 1)[0]},
        )
        assert failed.status == 502
        pulled = running.registry.entry("bot").canary
        assert pulled is not None and pulled.pulled is not None
        async with ops_page(running.url, shot="agent-canary-pulled") as ui:
            await ui.open()
            await expect(ui.page.locator('tr[data-agent="bot"] .canary-cell')).to_contain_text(
                "pulled"
            )
            await ui.go("#/agent/bot")
            box = ui.page.locator("#canary-panel .error-box")
            await expect(box).to_contain_text("Pulled")
            await expect(box).to_contain_text(pulled.pulled.reason)
            await expect(box.locator("time")).to_have_attribute("data-at", str(pulled.pulled.at))
            guard = ui.page.locator("#canary-panel table.guard tr.bad")
            await expect(guard).to_contain_text("recent error rate")
            # Resume is offered only where the service documents an endpoint for it.
            paths = openapi_document()["paths"]
            offered = any(p.endswith("/resume") and "post" in v for p, v in paths.items())
            await expect(ui.page.locator("#resume")).to_have_count(1 if offered else 0)
            await expect(ui.page.locator("#pause")).to_have_count(0)  # nothing to pause now
            # The failed run's trace: its error in red.
            await ui.go(f"#/trace/{failed.headers['X-Trace-Id']}")
            error = ui.page.locator(".timeline .span.error")
            await expect(error).to_have_count(1)
            await expect(error.locator(".span-label")).to_have_text("error model_error")
            await expect(ui.page.locator("#trace .badge.bad")).to_have_text("error")


TOOL_ENTRIES = [
    "calculator",
    {"type": "http", "name": "orders", "url": "https://api.example.com/o"},
    {"type": "mcp", "name": "search", "url": "https://mcp.internal/search"},
    {"type": "agent", "name": "bot", "description": "Answers"},
    {"type": "agent", "name": "ghost"},
]
"""Tool entries as a definition lists them: a sub-agent's state comes from the live list."""

FLEET_STATUS = {
    "name": "x",
    "state": "refused",
    "revision": None,
    "description": "",
    "source": {
        "kind": "nacos",
        "location": "public/AGENTS/x.agent.yaml",
        "group": "AGENTS",
        "data_id": "x.agent.yaml",
        "md5": "0123456789abcdef",
        "gray": "beta-ops",
        "state": "snapshot",
        "since": 1_700_000_000,
    },
    "factory": "nacos",
    "loaded_at": None,
    "last_error": {
        "source": "",
        "path": "model",
        "message": "bad",
        "at": 1,
        "line": 3,
        "column": 5,
    },
    "canary": {
        "revision": "r2",
        "weight": 25,
        "state": "pulled",
        "sticky_key": "auto",
        "pulled": {
            "reason": "paused by ops",
            "at": 1_700_000_000,
            "by": "config",
            "recorded": True,
        },
        "steps": {
            "weights": [5, 25, 50],
            "step": 1,
            "since": 1_700_000_000,
            "healthy_requests": 7,
            "after": {"requests": 20},
            "auto_promote": True,
        },
        "guard": {"max_error_rate": 0.2, "min_requests": 20, "max_latency_ratio": 3},
        "loaded_at": 1_700_000_000,
        "source": {"kind": "nacos", "location": "public/AGENTS/x.canary.yaml"},
    },
    "traffic": {},
    "revisions": [],
    "mcp_servers": [
        {"name": "orders", "state": "down", "tools": ["a", "b"], "last_error": "refused"}
    ],
}
"""A status with the fields other parts of the service add (source state and gray, refusals
with line and column, progressive steps and recorded pauses, MCP servers): the page's
rendering functions must show them, whichever of those parts is merged."""


async def test_the_page_shows_the_status_fields_other_parts_add(service: RunningService) -> None:
    async with ops_page(service.url, key=ADMIN_KEY) as ui:
        await ui.open()
        await expect(ui.page.locator("#agent-rows tr[data-agent]")).to_have_count(2)
        html = await ui.page.evaluate(
            "s => ({row: agentRow(s), panel: canaryPanel(s, null), parts: partsFromStatus(s),"
            " tools: s.tools.map(toolPart)})",
            {**FLEET_STATUS, "tools": TOOL_ENTRIES},
        )
    row, panel = html["row"], html["panel"]
    for shown in ("refused", "gray", "snapshot", "AGENTS / x.agent.yaml", "01234567"):
        assert shown in row, shown
    assert "line 3, column 5" in row and "step 2/3" in row and "pulled" in row
    assert "Pulled by config" in panel and "recorded in its definition" in panel
    assert "7 healthy requests" in panel and "promotes itself after the last step" in panel
    assert '<span class="step current">25%</span>' in panel
    assert html["parts"] == [
        {"name": "orders", "kind": "MCP server", "state": "down", "details": "2 tools · refused"}
    ]
    assert html["tools"] == [
        {"name": "calculator", "kind": "tool", "state": "", "details": ""},
        {"name": "orders", "kind": "http", "state": "", "details": "GET https://api.example.com/o"},
        {"name": "search", "kind": "mcp", "state": "", "details": "https://mcp.internal/search"},
        {"name": "bot", "kind": "sub-agent", "state": "serving", "details": "Answers"},
        {"name": "ghost", "kind": "sub-agent", "state": "unknown", "details": ""},
    ]
