"""The Grafana dashboard and the Prometheus alerts in ``deploy/`` name only metrics the
service exposes: each one is found in ``/metrics`` of a service driven into every state
they watch (traffic, errors, a pulled canary, an open circuit, a refused definition, a
degraded source)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from dynagent.registry.canary import picks_canary
from tests.support import Fail, Reply, ScriptedModelServer
from tests.support.service import agent_document, running_service, service_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
METRIC = re.compile(r"\b(?:dynagent|process|python)_[a-z0-9_]+\b")


def dashboard_expressions() -> list[str]:
    dashboard: dict[str, Any] = json.loads((DEPLOY / "grafana" / "dynagent.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def alert_expressions() -> list[str]:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


SAMPLES_OF = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
"""The samples a family of each type exposes once it has a labelled child."""


def exposed(text: str) -> set[str]:
    """Sample names, and family names (``# TYPE``) with the sample names of their type, so
    that a family without samples yet (a gauge, or evaluation counters before any run)
    counts."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split()[:4]
            names.update([family, *(family + suffix for suffix in SAMPLES_OF.get(kind, ()))])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def test_the_files_name_what_they_must_watch() -> None:
    dashboard = " ".join(dashboard_expressions())
    for metric in (
        "requests_total",
        "request_duration_seconds_bucket",
        "canary_weight",
        "reloads_total",
        "circuit_state",
        "errors_total",
        "eval_cases_total",
        "judge_score_bucket",
        "eval_gate",
    ):
        assert f"dynagent_{metric}" in dashboard, metric
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    names = [rule["alert"] for rule in alerts["groups"][0]["rules"]]
    assert names == [
        "DynagentCanaryPulled",
        "DynagentHighErrorRate",
        "DynagentCircuitOpen",
        "DynagentConfigRefused",
        "DynagentConfigRefusedRepeatedly",
        "DynagentSourceDegraded",
        "DynagentGateFailed",
        "DynagentEvalCasesFailing",
        "DynagentWebhookFailing",
    ]
    for expr in [*dashboard_expressions(), *alert_expressions()]:
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr


async def test_every_metric_they_name_is_in_metrics(
    agents_dir: Path, state_dir: Path, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("fine")])
    model_server.script("gpt-canary", [Fail(500)])
    stable = agent_document("bot", model_server)
    breaker = {
        "name": "gpt-canary",
        "retries": 0,
        "circuit_breaker": {"failures": 1, "cooldown": 60},
    }
    canary = {
        **agent_document("bot", model_server, model=breaker),
        "rollout": {"weight": 50, "guard": {"min_requests": 1, "max_error_rate": 0}},
    }
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        service.write_agent(stable)
        service.write_agent(canary, filename="bot.canary.yaml")
        service.write_agent("name: broken\nmodel: {provider: test\n", filename="broken.yaml")
        await service.registry.wait_for(
            lambda r: "bot" in r and r.entry("bot").canary is not None and "broken" in r
        )
        keys = [f"caller-{i}" for i in range(100)]
        to_stable = next(k for k in keys if not picks_canary("bot", k, 50))
        to_canary = next(k for k in keys if picks_canary("bot", k, 50))
        ok = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": to_stable}
        )
        failed = await service.client.post(  # routed, so the guard pulls the canary
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": to_canary}
        )
        assert (ok.status, failed.status) == (200, 502)
        service.registry.readiness.set_degraded(
            "nacos public/AGENTS", "unreachable, serving the snapshot"
        )
        for _ in range(2):  # a version older than the one served, refused twice
            service.registry.readiness.refused_stale("nacos public/AGENTS")
        text = await (await service.client.get("/metrics")).text()
    named = {
        m for expr in [*dashboard_expressions(), *alert_expressions()] for m in METRIC.findall(expr)
    }
    assert named - exposed(text) == set()
    samples = dict(
        line.rsplit(" ", 1)
        for line in text.splitlines()
        if line.startswith(
            (
                "dynagent_canary",
                "dynagent_config_refused",
                "dynagent_source_degraded",
                "dynagent_source_stale_refused_total",
                "dynagent_circuit",
            )
        )
    )
    canary_at, stable_at = (f"{m} at {model_server.base_url}" for m in ("gpt-canary", "gpt-main"))
    assert samples == {
        'dynagent_canary_weight{agent="bot"}': "50.0",
        'dynagent_canary_pulled{agent="bot"}': "1.0",
        'dynagent_config_refused{agent="bot"}': "0.0",
        'dynagent_config_refused{agent="broken"}': "1.0",
        f'dynagent_circuit_state{{agent="bot",endpoint="{canary_at}",variant="canary"}}': "2.0",
        f'dynagent_circuit_state{{agent="bot",endpoint="{stable_at}",variant="stable"}}': "0.0",
        'dynagent_source_degraded{source="nacos public/AGENTS"}': "1.0",
        'dynagent_source_stale_refused_total{source="nacos public/AGENTS"}': "2.0",
    }
