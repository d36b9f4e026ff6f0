"""The Evaluations view of the operations page, in a real browser against the real service:
an agent's suite, its runs, a run's cases with the difference against the stable, the
"Run suite" button, and a canary's gate in its panel."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from playwright.async_api import Page, Response, Route, expect

from dynagent.evals import load_suite
from dynagent.evals.runner import SuiteRun, run_suite
from tests.support.service import RunningService, agent_document, running_service, service_config

from .browser import ops_page

ADMIN_KEY = "ui-evals-admin-key-aaaaaaaaaaaaaaaaa"
USER_KEY = "ui-evals-user-key-bbbbbbbbbbbbbbbbbb"
LIVE = 2000
"""Milliseconds the page has to show a change the service already applied."""
HOSTILE = "<script>window.pwned=1</script><img src=x onerror=window.pwned=2>"
"""Text a model may answer (and a check may quote): shown as text, never run as HTML."""
SUITE: dict[str, Any] = {
    "cases": [
        {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]},
        {
            "id": "keeps-the-stable-voice",
            "input": "who speaks?",
            "assert": [{"type": "icontains", "value": "as the stable"}],
        },
        {
            "id": "speaks-as-the-candidate",
            "input": "who speaks now?",
            "assert": [{"type": "icontains", "value": "as the candidate"}],
        },
        {
            "id": "echoes-hostile-text",
            "input": HOSTILE,
            "assert": [
                {"type": "icontains", "value": "you said"},
                {"type": "not-contains", "value": HOSTILE},
            ],
        },
    ],
    "pass": {"min_pass_rate": 1.0},
}
"""On the offline model (it echoes the input and the prompt): the stable passes the first two
cases, the canary the first and third; the last fails on both, quoting the hostile text."""
CHANGES = {
    "greets": "same-pass",
    "keeps-the-stable-voice": "regressed",
    "speaks-as-the-candidate": "fixed",
    "echoes-hostile-text": "same-fail",
}


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    """``bot`` with a canary and a suite, ``plain`` without a suite; an admin key and a key
    limited to ``bot``."""
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys: [{{name: ops-user, key: {USER_KEY}, agents: [bot]}}]\n")
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    async with running_service(config, environ={"DYNAGENT_ADMIN_KEYS": ADMIN_KEY}) as running:
        running.write_agent(agent_document("bot", system="Answer as the stable."))
        canary = agent_document("bot", system="Answer as the candidate.")
        running.write_agent({**canary, "rollout": {"weight": 50}}, filename="bot.canary.yaml")
        running.write_agent(yaml.safe_dump(SUITE, sort_keys=False), filename="bot.evals.yaml")
        running.write_agent(agent_document("plain"))
        await running.registry.wait_for(
            lambda r: (
                "plain" in r
                and "bot" in r
                and r.entry("bot").canary is not None
                and "evals" in r.status("bot")
            )
        )
        yield running


async def compared_record(service: RunningService) -> dict[str, Any]:
    """A compare run's record (contract: the run's ``as_dict()`` and ``compare``), made of
    real runs of the suite on the served stable and canary."""
    entry = service.registry.entry("bot")
    assert entry.stable is not None and entry.canary is not None
    suite = load_suite(SUITE)
    stable = await run_suite(entry.stable, suite)
    baseline = {case.case_id: case.passed for case in stable.cases}
    canary = await run_suite(entry.canary.agent, suite, variant="canary", baseline=baseline)
    return {
        **canary.as_dict(),
        "trigger": "api",
        "by": "admin",
        "compare": compare_field(stable, canary),
    }


def compare_field(stable: SuiteRun, canary: SuiteRun) -> dict[str, Any]:
    before = {case.case_id: case for case in stable.cases}

    def change(was: bool, now: bool) -> str:
        return {(True, True): "same-pass", (False, False): "same-fail"}.get(
            (was, now), "fixed" if now else "regressed"
        )

    return {
        "stable_run": stable.id,
        "stable_revision": stable.revision,
        "cases": [
            {
                "id": case.case_id,
                "stable_passed": before[case.case_id].passed,
                "stable_score": before[case.case_id].verdict.score,
                "passed": case.passed,
                "score": case.verdict.score,
                "change": change(before[case.case_id].passed, case.passed),
            }
            for case in canary.cases
        ],
    }


async def assert_no_markup_ran(page: Page, box: str) -> None:
    """The hostile text is on screen as text: no script ran, no element was made of it."""
    assert await page.evaluate("window.pwned") is None
    assert await page.locator(f"{box} img, {box} script").count() == 0
    answer = page.locator(f'{box} tr[data-case="echoes-hostile-text"] pre.answer')
    await expect(answer).to_contain_text(HOSTILE)


async def test_a_runs_cases_show_the_change_against_the_stable_and_hostile_text_as_text(
    service: RunningService,
) -> None:
    """The rendering of a compare run's record (contract 1), whichever part runs it."""
    record = await compared_record(service)
    async with ops_page(service.url, key=ADMIN_KEY, shot="evals-run-rendered") as ui:
        await ui.open("#/evals")
        await expect(ui.page.locator('#evals-rows tr[data-agent="bot"]')).to_contain_text("4 cases")
        await ui.page.evaluate(
            "r => { document.getElementById('view').innerHTML ="
            " `<div id='eval-run'>${runDetail(r)}</div>`; }",
            record,
        )
        rows = ui.page.locator("#eval-run tr[data-case]")
        await expect(rows).to_have_count(4)
        shown = {
            await row.get_attribute("data-case"): await row.get_attribute("data-change")
            for row in await rows.all()
        }
        assert shown == CHANGES
        regressed = ui.page.locator('tr[data-case="keeps-the-stable-voice"]')
        await expect(regressed.locator("td").nth(1)).to_have_text("fail")
        await expect(regressed.locator("td").nth(6)).to_contain_text("pass")
        await expect(regressed.locator("td").nth(7)).to_have_text("regressed")
        await expect(ui.page.locator(".run-summary")).to_contain_text("1 regressed")
        await expect(ui.page.locator(".run-summary")).to_contain_text("1 fixed")
        hostile = ui.page.locator('tr[data-case="echoes-hostile-text"]')
        await expect(hostile.locator(".case-detail > ul.checks")).to_contain_text(HOSTILE)
        await hostile.locator("summary").click()
        await assert_no_markup_ran(ui.page, "#eval-run")


GATES = {
    "pending": ("gate pending", "warn-box", "no live traffic until it passes"),
    "running": ("gate running", "warn-box", "no live traffic until it passes"),
    "passed": ("gate passed", "ok-box", "the canary takes traffic"),
    "failed": ("gate failed", "error-box", "the rollout is paused"),
    "forced": ("gate forced", "warn-box", "forced past its suite"),
    "stale": ("gate stale", "warn-box", "it runs again"),
}
"""Each gate state (contract: the status's ``canary.gate``): its badge, box and sentence."""


@pytest.mark.parametrize("gate_state", list(GATES))
async def test_the_canary_panel_shows_each_gate_state_and_its_reason_as_text(
    service: RunningService, gate_state: str
) -> None:
    status = service.registry.status("bot")
    reason = f"eval: 1 of 4 cases failed: {HOSTILE}"
    status["canary"]["gate"] = {
        "state": gate_state,
        "revision": status["canary"]["revision"],
        "suite_revision": status["evals"]["revision"],
        "judge": None,
        "run_id": "0123456789abcdef",
        "reason": reason,
        "at": 1_700_000_000.0,
        "by": "ops-admin" if gate_state == "forced" else None,
    }
    badge, box, sentence = GATES[gate_state]
    async with ops_page(service.url, key=ADMIN_KEY) as ui:
        await ui.open("#/agents")
        await expect(ui.page.locator('tr[data-agent="bot"]')).to_be_visible()
        await ui.page.evaluate(
            "s => { document.getElementById('view').innerHTML ="
            " `<div id='cell'>${canaryCell(s.canary)}</div>${canaryPanel(s, null)}`; }",
            status,
        )
        gate = ui.page.locator("#canary-panel #canary-gate")
        await expect(gate).to_have_attribute("class", f"{box} gate")
        await expect(gate.locator(".badge")).to_have_text(badge)
        await expect(gate).to_contain_text(sentence)
        await expect(gate.locator(".gate-reason")).to_have_text(reason)
        link = gate.locator("a")
        await expect(link).to_have_attribute("href", "#/evals/bot/0123456789abcdef")
        if gate_state == "forced":
            await expect(gate).to_contain_text("by ops-admin")
        # The agents table flags a canary its gate holds back; a passed gate needs no flag.
        cell = ui.page.locator("#cell .badge", has_text="gate")
        await expect(cell).to_have_count(0 if gate_state == "passed" else 1)
        assert await ui.page.evaluate("window.pwned") is None
        assert await ui.page.locator("#view img, #view script").count() == 0


FITS = """() => ({
  page: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  cases: Math.max(0, ...[...document.querySelectorAll("table.eval-cases, table.eval-runs")]
    .map((t) => t.getBoundingClientRect().right - document.documentElement.clientWidth)),
})"""
"""Pixels the page and its tables reach past the window: both 0 when they fit."""


async def test_run_suite_from_the_page_shows_progress_then_the_cases_against_the_stable(
    service: RunningService,
) -> None:
    async with ops_page(service.url, key=ADMIN_KEY, shot="evals-run", viewport_width=1280) as ui:
        await ui.open("#/evals")
        listed = ui.page.locator("#evals-rows tr[data-agent]")
        await expect(listed).to_have_count(1)  # ``plain`` has no suite
        await expect(listed).to_contain_text("4 cases")
        await listed.locator("a").click()
        await expect(ui.page.locator("#eval-runs")).to_have_text("No runs yet.")
        await expect(ui.page.locator("#eval-variant")).to_have_value("canary")
        await expect(ui.page.locator("#eval-compare")).to_be_checked()
        await ui.page.locator("#eval-run").focus()  # the keyboard is enough
        # A live update (here a new version of the suite) redraws the suite, not the form
        # someone is about to submit: the focus stays on the button.
        await ui.page.evaluate("document.getElementById('eval-run').dataset.mark = 'kept'")
        edited = {**SUITE, "pass": {"min_pass_rate": 1.0, "min_mean_score": 0.0}}
        service.write_agent(yaml.safe_dump(edited, sort_keys=False), filename="bot.evals.yaml")
        revision = load_suite(edited).revision
        await expect(ui.page.locator("#suite")).to_contain_text(revision, timeout=LIVE)
        focused = "[document.activeElement.id, document.activeElement.dataset.mark]"
        assert await ui.page.evaluate(focused) == ["eval-run", "kept"]
        await ui.page.keyboard.press("Enter")
        progress = ui.page.locator("#eval-progress")
        await expect(progress.locator(".badge")).to_have_text("failed")
        await expect(progress).to_contain_text("4 of 4 cases · 2 failed")
        await expect(ui.page.locator("#eval-run")).to_be_enabled()
        run_id = (await ui.page.locator("#eval-open").get_attribute("href") or "").split("/")[-1]
        await expect(ui.page.locator(f'#eval-runs tr[data-run="{run_id}"]')).to_contain_text(
            "1 regressed"
        )
        await ui.shot("evals-agent")
        await ui.page.locator("#eval-open").click()
        rows = ui.page.locator("#eval-run tr[data-case]")
        await expect(rows).to_have_count(4)
        shown = {
            await row.get_attribute("data-case"): await row.get_attribute("data-change")
            for row in await rows.all()
        }
        assert shown == CHANGES
        await ui.page.locator("#only-changes").check()
        await expect(ui.page.locator("#eval-run tr[data-case]:visible")).to_have_count(2)
        await ui.page.locator("#only-changes").uncheck()
        await ui.page.locator('tr[data-case="echoes-hostile-text"] summary').click()
        await assert_no_markup_ran(ui.page, "#eval-run")
        assert await ui.page.evaluate(FITS) == {"page": 0, "cases": 0}


async def test_a_key_without_admin_sees_the_suite_but_neither_runs_nor_the_button(
    service: RunningService,
) -> None:
    async with ops_page(service.url, key=USER_KEY, shot="evals-limited") as ui:
        await ui.open("#/evals/bot")
        await expect(ui.page.locator("#suite")).to_contain_text("4 cases")
        await expect(ui.page.locator("#suite")).to_contain_text(
            "Running a suite needs an admin key"
        )
        await expect(ui.page.locator("#eval-runs")).to_have_text(
            "Evaluation runs need an admin key."
        )
        await expect(ui.page.locator("#eval-run, #eval-form")).to_have_count(0)
        assert not [url for url in ui.requests if url.endswith("/evals")]


async def test_a_refused_suite_shows_its_error_and_the_last_good_one_stays(
    service: RunningService,
) -> None:
    good = service.registry.status("bot")["evals"]["revision"]
    async with ops_page(service.url, key=ADMIN_KEY, shot="evals-refused") as ui:
        await ui.open("#/evals/bot")
        suite = ui.page.locator("#suite")
        await expect(suite).to_contain_text(good)
        broken = "cases:\n  - id: greets\n    input: hello\n    assert:\n      - {type: nope}\n"
        service.write_agent(broken, filename="bot.evals.yaml")
        await service.registry.wait_for(
            lambda r: r.status("bot")["evals"]["last_error"] is not None
        )
        await expect(suite.locator(".error-box")).to_contain_text("Newest version refused")
        await expect(suite.locator(".error-box")).to_contain_text(f"last good suite, {good}")
        await ui.go("#/evals")
        await expect(ui.page.locator('#evals-rows tr[data-agent="bot"]')).to_have_class("has-error")


async def test_a_failed_gate_shows_in_the_canary_panel_and_the_agents_table(
    agents_dir: Path, state_dir: Path
) -> None:
    """A gated canary whose suite fails: the panel says so with the suite's reason, the
    rollout is paused by the gate, and the agents table flags the canary."""
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={}) as running:
        running.write_agent(agent_document("bot", system="Answer as the stable."))
        running.write_agent(yaml.safe_dump(SUITE, sort_keys=False), filename="bot.evals.yaml")
        canary = agent_document("bot", system="Answer as the candidate.")
        gated = {**canary, "rollout": {"weight": 50, "gate": {}}}
        running.write_agent(gated, filename="bot.canary.yaml")

        def failed(registry: Any) -> bool:
            status = registry.status("bot") if "bot" in registry else {}
            return ((status.get("canary") or {}).get("gate") or {}).get("state") == "failed"

        await running.registry.wait_for(failed)
        gate = running.registry.status("bot")["canary"]["gate"]
        async with ops_page(running.url, shot="evals-gate-failed", viewport_width=1280) as ui:
            await ui.open("#/agents")
            cell = ui.page.locator('tr[data-agent="bot"] .canary-cell')
            await expect(cell).to_contain_text("gate failed")
            await ui.go("#/agent/bot")
            box = ui.page.locator("#canary-panel #canary-gate")
            await expect(box).to_have_attribute("data-state", "failed")
            await expect(box.locator(".gate-reason")).to_have_text(gate["reason"])
            await expect(box).to_contain_text(gate["suite_revision"])
            pause = ui.page.locator("#canary-panel .error-box", has_text="Pulled by gate")
            await expect(pause).to_contain_text(gate["reason"])
            assert await ui.page.evaluate(FITS) == {"page": 0, "cases": 0}
            link = box.locator("a")
            await expect(link).to_have_attribute("href", f"#/evals/bot/{gate['run_id']}")


async def test_the_first_view_waits_for_every_script_however_late_one_arrives(
    service: RunningService,
) -> None:
    """``evals.js`` held back until the page's key check has been answered (or 2 s): the
    page still draws its first view, with the functions of both scripts."""
    answered = asyncio.Event()

    async def late(route: Route) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(answered.wait(), 2)
        await route.continue_()

    def seen(response: Response) -> None:
        if response.url.endswith("/v1/whoami"):
            answered.set()

    async with ops_page(service.url, key=ADMIN_KEY) as ui:
        await ui.page.route("**/ui/evals.js", late)
        ui.page.on("response", seen)
        await ui.open("#/evals")
        await expect(ui.page.locator('#evals-rows tr[data-agent="bot"]')).to_contain_text("4 cases")
