"""The operations page in Debian's Chromium, headless, through Playwright's async API.

Playwright is pointed at the system browser (``executable_path``); it never downloads
one. Every request the page makes is recorded, so a test can assert that none left the
service; a screenshot of each test's last view is written under ``var/ui-shots/``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.async_api import Page, Request, async_playwright

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "var" / "ui-shots"
INSTALL = "apt-get install -y chromium"


def chromium() -> str:
    """The system Chromium (``DYNAGENT_CHROMIUM`` overrides); `make setup` installs it."""
    found = os.environ.get("DYNAGENT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        pytest.fail(f"Chromium is not installed: run `{INSTALL}` (scripts/browser.sh does)")
    return found


@dataclass
class OpsPage:
    """One tab on the operations page of the service at ``base``."""

    page: Page
    base: str
    requests: list[str] = field(default_factory=list)
    """Every URL the tab requested, in order."""
    headers: list[dict[str, str]] = field(default_factory=list)

    async def open(self, hash_path: str = "#/agents") -> None:
        await self.page.goto(f"{self.base}/ui/{hash_path}")

    async def go(self, hash_path: str) -> None:
        await self.page.evaluate("h => { location.hash = h; }", hash_path)

    def foreign_requests(self) -> list[str]:
        origin = urlsplit(self.base).netloc
        return [url for url in self.requests if urlsplit(url).netloc != origin]

    async def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        await self.page.screenshot(path=str(path), full_page=True)
        return path


@asynccontextmanager
async def ops_page(
    base: str, *, key: str | None = None, shot: str = "", viewport_width: int = 1400
) -> AsyncIterator[OpsPage]:
    """A fresh browser and tab; ``key`` is put in session storage as if typed at the prompt.
    Leaving the block takes a screenshot named ``shot`` and checks no request left ``base``."""
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium(), headless=True)
        try:
            context = await browser.new_context(viewport={"width": viewport_width, "height": 900})
            if key is not None:
                await context.add_init_script(
                    f"sessionStorage.setItem('dynagent.key', {key!r});"  # before the page runs
                )
            page = await context.new_page()
            opened = OpsPage(page, base)

            def record(request: Request) -> None:
                opened.requests.append(request.url)
                opened.headers.append(dict(request.headers))

            page.on("request", record)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            yield opened
            if shot:
                await opened.shot(shot)
            assert errors == [], errors
            assert opened.foreign_requests() == []
        finally:
            await browser.close()


__all__ = ["INSTALL", "SHOTS", "OpsPage", "chromium", "ops_page"]
