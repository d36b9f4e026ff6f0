"""Pause and resume of a rollout from the operations page, in Debian's Chromium, against a
real ``dynagent serve`` process: each asks first, shows its result, and changes what serves
(paused: every caller gets the stable; resumed: the canary again), as the canary's file
records. A key that is not an admin's sees neither button."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from playwright.async_api import expect

from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.process import ServedProcess, free_port, serve_process, write_config
from tests.support.service import agent_document, revision_of, write_agent

from .browser import ops_page

ADMIN_KEY = "ui-pause-admin-key-aaaaaaaaaaaaaa"
USER_KEY = "ui-pause-user-key-bbbbbbbbbbbbbbb"
"""Limited to ``bot``, no admin."""
STABLE = agent_document("bot", system="Stable.")
CANARY = canary_document(agent_document("bot", system="Candidate."), weight=100)
"""At 100 % every unpinned caller gets the canary while it serves, and none while paused."""
LIVE = 2000
"""Milliseconds the page has to show a change the service already applied."""


@pytest.fixture
def agents(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    write_agent(folder, STABLE)
    write_agent(folder, CANARY, filename=canary_filename("bot"))
    return folder


@pytest.fixture
async def served(agents: Path, tmp_path: Path) -> AsyncIterator[ServedProcess]:
    """``dynagent serve`` on ``agents``, with an admin key and a key limited to ``bot``."""
    keys = [
        {"name": "ops-admin", "key": ADMIN_KEY, "admin": True},
        {"name": "ops-user", "key": USER_KEY, "agents": ["bot"]},
    ]
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"keys": keys}))
    config = write_config(
        tmp_path,
        {
            "factories": {"default": {"directory": str(agents)}},
            "sessions": {"store": "memory"},
            "auth": {"keys_file": str(keys_file)},
        },
    )
    async with serve_process(config, free_port()) as process:
        yield process
        process.terminate()
        assert await process.exit_code(within=30) == 0


async def answered_by(url: str) -> tuple[str, str]:
    """The variant and revision that answer an unpinned caller now."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            f"{url}/v1/agents/bot/invoke",
            json={"input": "hi"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}", "X-Canary-Key": "caller-1"},
        ) as response,
    ):
        assert response.status == 200, await response.text()
        return response.headers["X-Agent-Variant"], response.headers["X-Agent-Revision"]


def rollout_in(agents: Path) -> dict[str, Any]:
    document = yaml.safe_load((agents / canary_filename("bot")).read_text(encoding="utf-8"))
    rollout: dict[str, Any] = document["rollout"]
    rollout.pop("history", None)  # the trail of decisions: tests/service/test_rollout_history.py
    return rollout


async def test_pause_and_resume_from_the_page_change_what_serves(
    served: ServedProcess, agents: Path
) -> None:
    canary, stable = canary_revision(CANARY), revision_of(STABLE)
    assert await answered_by(served.url) == ("canary", canary)
    async with ops_page(served.url, key=ADMIN_KEY, shot="agent-resumed-by-hand") as ui:
        await ui.open("#/agent/bot")
        page = ui.page
        pause, resume = page.locator("#pause"), page.locator("#resume")
        result = page.locator("#action-result")
        await expect(pause).to_have_text("Pause rollout")
        await expect(resume).to_have_count(0)

        await pause.click()  # asked first; cancelling changes nothing
        await expect(page.locator("#confirm-text")).to_have_text(
            f"Pause the rollout of bot? Canary {canary} leaves traffic on every replica; "
            f"{stable} answers every caller until it is resumed."
        )
        await expect(page.locator("#confirm-reason")).to_be_visible()
        await page.locator("#confirm-cancel").click()
        assert rollout_in(agents) == {"weight": 100}
        assert await answered_by(served.url) == ("canary", canary)

        await pause.click()
        await page.locator("#confirm-reason").fill("checkout errors")
        await ui.shot("agent-pause-confirm")
        await page.locator("#confirm-reason").press("Enter")  # confirms, as Confirm does
        await expect(result).to_have_text(
            f"Done: canary {canary} of bot paused; {stable} answers every caller."
        )
        assert await answered_by(served.url) == ("stable", stable)
        paused = rollout_in(agents)["paused"]
        assert (paused["reason"], paused["by"], paused["revision"]) == (
            "checkout errors",
            "ops-admin",
            canary,
        )
        box = page.locator("#canary-panel .error-box")
        await expect(box).to_contain_text("Pulled by ops-admin", timeout=LIVE)
        await expect(box).to_contain_text("checkout errors")
        await expect(pause).to_have_count(0, timeout=LIVE)
        await ui.shot("agent-paused-by-hand")

        await resume.click()
        await expect(page.locator("#confirm-text")).to_have_text(
            f"Resume the rollout of bot? Canary {canary} takes 100% of the traffic again."
        )
        await expect(page.locator("#confirm-reason-row")).to_be_hidden()
        await page.locator("#confirm-ok").click()
        await expect(result).to_have_text(
            f"Done: canary {canary} of bot is back in traffic at 100%."
        )
        assert await answered_by(served.url) == ("canary", canary)
        assert rollout_in(agents) == {"weight": 100}
        await expect(pause).to_have_text("Pause rollout", timeout=LIVE)
        await expect(resume).to_have_count(0)
        await expect(box).to_have_count(0)


async def test_a_limited_key_sees_no_pause_or_resume(served: ServedProcess, agents: Path) -> None:
    async with ops_page(served.url, key=USER_KEY, shot="agent-limited-rollout") as ui:
        await ui.open("#/agent/bot")
        actions = ui.page.locator("#actions")
        await expect(actions).to_contain_text("need an admin key")
        await expect(ui.page.locator("#canary-panel")).to_contain_text("guard ok")
        buttons = ui.page.locator("#actions button")
        await expect(buttons).to_have_count(0)
        # Paused by an admin meanwhile: the page follows, and still offers no resume.
        async with (
            aiohttp.ClientSession() as http,
            http.post(
                f"{served.url}/v1/agents/bot/rollout/pause",
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            ) as response,
        ):
            assert response.status == 200, await response.text()
        await expect(ui.page.locator("#canary-panel .error-box")).to_contain_text(
            "Pulled by ops-admin", timeout=LIVE
        )
        await expect(buttons).to_have_count(0)
        await expect(ui.page.locator("#pause, #resume")).to_have_count(0)
    assert rollout_in(agents)["paused"]["reason"] == "paused by hand"
