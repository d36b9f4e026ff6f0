"""The alert rules in deploy/prometheus/ pass ``promtool check rules`` and are evaluated by
a real Prometheus (scripts/prometheus.sh) scraping a real service: every rule loads, and
every one evaluates without an error."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.prometheus import installed, prometheus
from tests.support.service import agent_document, running_service, service_config

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "alerts.yml"


def test_promtool_accepts_the_rules() -> None:
    installed()  # this test may run before any that starts a Prometheus
    done = subprocess.run(
        ["promtool", "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _rules(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/rules", timeout=5) as response:
        body: dict[str, Any] = json.load(response)
    return [rule for group in body["data"]["groups"] for rule in group["rules"]]


@pytest.mark.slow
async def test_a_real_prometheus_evaluates_every_rule_without_an_error(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    config = service_config(agents_dir, state_dir, metrics={"public": True})
    async with running_service(config, environ={}) as service:
        service.write_agent(agent_document("bot"))
        await service.registry.wait_for(lambda r: "bot" in r)
        answer = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        assert answer.status == 200
        target = f"127.0.0.1:{service.client.port}"
        async with prometheus(tmp_path / "prometheus", [target]) as url:

            async def evaluated() -> list[dict[str, Any]]:
                while True:
                    rules = await asyncio.to_thread(_rules, url)
                    if rules and all(r.get("lastEvaluation", "").startswith("20") for r in rules):
                        return rules
                    await asyncio.sleep(0.2)  # polling Prometheus' own API: its rounds

            rules = await asyncio.wait_for(evaluated(), 60)

    names = {rule["name"] for rule in rules}
    assert "DynagentGateFailed" in names and "DynagentWebhookFailing" in names
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
