"""``rollout.analysis``: a canary judged against its stable version, from a real
Prometheus scraping the service or from this replica's own figures."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from loguru import logger

from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry
from tests.service.test_online_scores import JUDGE_MODEL, ask, judged_by_variant, keys, setup
from tests.support import Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.prometheus import prometheus
from tests.support.service import RunningService, agent_document, running_service, service_config

UNREACHABLE = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "x"}
NO_GUARD = {"max_error_rate": 1.0, "max_latency_ratio": 1000}
"""The fixed-threshold guard out of the way: these tests are about the analysis."""


async def _start_canary(
    service: RunningService, candidate: dict[str, Any], weight: float, **rollout: Any
) -> None:
    service.write_agent(agent_document("bot", system="Stable."))
    service.write_agent(
        canary_document(candidate, weight, guard=NO_GUARD, **rollout),
        filename=canary_filename("bot"),
    )
    revision = canary_revision(candidate)
    await service.registry.wait_for(
        lambda r: (
            "bot" in r and (c := r.entry("bot").canary) is not None and c.agent.revision == revision
        )
    )


async def _load(service: RunningService, stop: asyncio.Event, **headers: str) -> int:
    """Requests with fresh sessions until ``stop``; how many were sent."""
    sent = 0
    while not stop.is_set():
        body = {"input": "hi", "session_id": f"s-{sent}"}
        await service.client.post("/v1/agents/bot/invoke", json=body, headers=headers)
        sent += 1
    return sent


def _paused_by(by: str) -> Any:
    def done(registry: AgentRegistry) -> bool:
        canary = registry.entry("bot").canary
        return (
            canary is not None
            and canary.policy.paused is not None
            and (canary.policy.paused.by == by)
        )

    return done


@pytest.mark.slow
async def test_prometheus_figures_pause_a_canary_whose_errors_are_higher(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    config = service_config(agents_dir, state_dir, metrics={"public": True})
    async with running_service(config, environ={}) as service:
        port = service.client.port
        async with prometheus(tmp_path / "prometheus", [f"127.0.0.1:{port}"]) as url:
            failing = agent_document("bot", system="Canary.", model={**UNREACHABLE, "retries": 0})
            analysis = {"prometheus": {"url": url}, "interval": 1, "latency": None}
            await _start_canary(service, failing, 50, analysis=analysis)
            stop = asyncio.Event()
            load = asyncio.create_task(_load(service, stop))
            try:
                await service.registry.wait_for(_paused_by("analysis"), within=90)
            finally:
                stop.set()
                await load
            status = service.registry.status("bot")

    analysis_status = status["analysis"]
    assert analysis_status["source"] == "prometheus"
    assert analysis_status["verdict"] == "fail"
    (error_check,) = [c for c in analysis_status["checks"] if c["name"] == "error_rate"]
    assert error_check["verdict"] == "fail"
    assert error_check["figures"]["canary_errors"] > 0
    assert "error_rate: error rate higher" in status["canary"]["pulled"]["reason"]


async def _scraped(http: aiohttp.ClientSession, url: str) -> None:
    """Return just after Prometheus has scraped (its ``up`` sample changed)."""

    async def last() -> float | None:
        query = {"query": "timestamp(up)"}
        async with http.get(f"{url}/api/v1/query", params=query) as response:
            result = (await response.json())["data"]["result"]
        return float(result[0]["value"][1]) if result else None

    before = await last()
    async with asyncio.timeout(60):
        while (now := await last()) is None or now == before:
            await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_a_step_splits_only_the_requests_routed_at_its_own_weight(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    config = service_config(agents_dir, state_dir, metrics={"public": True})
    async with running_service(config, environ={}) as service, aiohttp.ClientSession() as http:
        port = service.client.port
        # A long scrape interval: the next scrape after a step brings seconds of requests
        # the old weight routed.
        targets = [f"127.0.0.1:{port}"]
        async with prometheus(tmp_path / "prometheus", targets, interval="10s") as url:
            candidate = agent_document("bot", system="Canary.")
            analysis = {"prometheus": {"url": url}, "interval": 0.2, "latency": None}
            analysis |= {"min_requests": 10**6, "max_inconclusive": 10**5}
            await _start_canary(service, candidate, 10, analysis=analysis)
            await _scraped(http, url)
            await _send(service, 200, "old")  # at 10 %, after that scrape
            document = canary_document(candidate, 90, guard=NO_GUARD, analysis=analysis)
            service.write_agent(document, filename=canary_filename("bot"))
            await service.registry.wait_for(
                lambda r: (c := r.entry("bot").canary) is not None and c.policy.weight == 90
            )
            await _send(service, 100, "new")

            def split_at_90() -> dict[str, Any] | None:
                checks = (service.registry.status("bot").get("analysis") or {}).get("checks", [])
                found = [c for c in checks if c["name"] == "sample_ratio"]
                figures = found[0]["figures"] if found else {}
                ready = figures.get("weight") == 90 and figures.get("routed", 0) >= 100
                return found[0] if ready else None

            async with asyncio.timeout(60):  # the next scrape, and a check after it
                while (check := split_at_90()) is None:
                    await asyncio.sleep(0.05)
            canary = service.registry.entry("bot").canary

    assert check["verdict"] == "pass", check
    assert check["figures"]["routed"] == 100 and check["figures"]["canary_share"] > 0.8, check
    assert canary is not None and canary.policy.paused is None


async def _send(service: RunningService, count: int, prefix: str) -> None:
    for n in range(count):
        body = {"input": "hi", "session_id": f"{prefix}-{n}"}
        response = await service.client.post("/v1/agents/bot/invoke", json=body)
        assert response.status == 200


async def test_a_broken_split_pauses_the_canary_on_this_replicas_figures(
    agents_dir: Path, state_dir: Path
) -> None:
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={}) as service:
        candidate = agent_document("bot", system="Canary.")
        analysis = {"interval": 0.2, "latency": None, "min_requests": 1000}
        # Every caller sends the same routing key: one variant gets all of the traffic.
        await _start_canary(service, candidate, 50, sticky_key="header", analysis=analysis)
        stop = asyncio.Event()
        load = asyncio.create_task(_load(service, stop, **{"X-Canary-Key": "one-key-for-all"}))
        try:
            await service.registry.wait_for(_paused_by("analysis"), within=60)
        finally:
            stop.set()
            await load
        canary = service.registry.entry("bot").canary
        status = service.registry.status("bot")["analysis"]

    assert canary is not None and canary.policy.paused is not None
    assert "sample ratio mismatch" in canary.policy.paused.reason
    assert status["source"] == "replica"
    assert "no Prometheus configured" in status["note"]


async def test_requests_rollout_match_keeps_from_the_canary_are_no_sample_of_the_split(
    agents_dir: Path, state_dir: Path
) -> None:
    config = service_config(agents_dir, state_dir, metrics={"public": True})
    async with running_service(config, environ={}) as service:
        candidate = agent_document("bot", system="Canary.")
        # The split alone decides: the error rate stays inconclusive, and never pauses.
        analysis = {"interval": 0.1, "latency": None, "min_requests": 10**6}
        analysis["max_inconclusive"] = 10**5
        match = 'headers["x-team"] == "staff"'
        await _start_canary(service, candidate, 50, match=match, analysis=analysis)

        def split_checked() -> dict[str, Any] | None:
            checks = (service.registry.status("bot").get("analysis") or {}).get("checks", [])
            found = [c for c in checks if c["name"] == "sample_ratio"]
            return found[0] if found and found[0]["figures"]["routed"] >= 100 else None

        sent = 0
        # Three callers in four are not staff: the stable serves them whatever the weight.
        while (check := split_checked()) is None and sent < 5000:
            team = "staff" if sent % 4 == 0 else "sales"
            body = {"input": "hi", "session_id": f"s-{sent}"}
            headers = {"X-Team": team}
            response = await service.client.post(
                "/v1/agents/bot/invoke", json=body, headers=headers
            )
            assert response.status == 200
            sent += 1
        canary = service.registry.entry("bot").canary
        traffic = service.registry.status("bot")["traffic"]
        metrics = await (await service.client.get("/metrics")).text()

    assert check is not None, f"no sample-ratio check after {sent} requests"
    assert check["verdict"] == "pass", check
    assert canary is not None and canary.policy.paused is None
    assert 0.3 < check["figures"]["canary_share"] < 0.7, check  # of staff's requests only
    # The others are counted, but not compared with the canary: the stable's figures are
    # of staff's requests, as the canary's are.
    staff = (sent + 3) // 4
    assert traffic["stable"]["unmatched"] == sent - staff
    assert traffic["stable"]["requests"] + traffic["canary"]["requests"] == staff
    assert 'source="unmatched"' in metrics
    assert 'dynagent_rollout_latency_seconds_count{agent="bot"' in metrics
    assert 'source="unmatched",variant="stable"}' in metrics  # its latencies, apart


async def test_too_little_traffic_holds_the_step_then_pauses_for_a_person(
    agents_dir: Path, state_dir: Path
) -> None:
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={}) as service:
        candidate = agent_document("bot", system="Canary.")
        analysis = {"interval": 0.2, "min_requests": 10_000, "max_inconclusive": 5}
        await _start_canary(
            service,
            candidate,
            10,
            steps=[10, 50],
            step_after={"requests": 1},
            analysis=analysis,
        )
        stop = asyncio.Event()
        load = asyncio.create_task(_load(service, stop))
        try:
            await service.registry.wait_for(_paused_by("analysis"), within=60)
        finally:
            stop.set()
            await load
        canary = service.registry.entry("bot").canary

    assert canary is not None and canary.policy.paused is not None
    assert canary.policy.weight == 10  # the step never advanced
    assert "inconclusive after 5 checks at 10 %" in canary.policy.paused.reason
    assert "too few requests" in canary.policy.paused.reason


async def test_an_unreachable_prometheus_holds_and_says_why(
    agents_dir: Path, state_dir: Path
) -> None:
    config = service_config(agents_dir, state_dir)
    lines: list[str] = []
    sink = logger.add(lines.append, level="WARNING", format="{message}")
    try:
        async with running_service(config, environ={}) as service:
            candidate = agent_document("bot", system="Canary.")
            analysis = {
                "prometheus": {"url": "http://127.0.0.1:9", "timeout": 1},
                "interval": 0.2,
                "max_inconclusive": 3,
            }
            await _start_canary(service, candidate, 10, analysis=analysis)
            await service.registry.wait_for(_paused_by("analysis"), within=60)
            canary = service.registry.entry("bot").canary
            status = service.registry.status("bot")["analysis"]
    finally:
        logger.remove(sink)

    assert canary is not None and canary.policy.paused is not None
    assert "Prometheus at http://127.0.0.1:9" in canary.policy.paused.reason
    assert status["source"] == "prometheus"
    # Three failed checks, one warning: a Prometheus that stays down is said once.
    said = [line for line in lines if line.startswith("analysis of agent bot:")]
    assert len(said) == 1, said


async def test_online_scores_that_drop_pause_the_canary_by_their_interval(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    analysis = {
        "interval": 0.2,
        "latency": None,
        "sample_ratio": False,
        "min_requests": 1,
        "max_error_increase": 1.0,
        "scores": {"max_drop": 0.2, "min_scores": 10},
    }
    setup(model_server, agents_dir, analysis=analysis, guard=NO_GUARD)
    model_server.script(JUDGE_MODEL, [Reply(judged_by_variant(0.9, 0.4))] * 24)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for key in keys("stable", 12) + keys("canary", 12):
            await ask(service, key)
        await service.app[SERVICE].judging.idle()
        await service.registry.wait_for(_paused_by("analysis"), within=30)
        status = service.registry.status("bot")

    (score,) = [c for c in status["analysis"]["checks"] if c["name"] == "score"]
    assert score["verdict"] == "fail"
    # Decided at an interval once each variant had its 10 scores (min_scores): on a busy
    # machine the last runs may still be judged when it decides.
    figures = score["figures"]
    assert figures["stable_scores"] >= 10
    assert 10 <= figures["canary_scores"] <= 12
    assert score["interval"][1] < -0.2
    assert "allowed drop 0.2" in status["canary"]["pulled"]["reason"]


@pytest.mark.parametrize("pin", [True, False])
async def test_a_step_split_counts_the_runs_its_own_weight_chose(
    agents_dir: Path, state_dir: Path, pin: bool
) -> None:
    # At 10 % most conversations start on the stable. After the step to 90 %, pinned ones
    # go on there while new ones go mostly to the canary: counted in the 90 % split, the
    # pinned ones would make routing look broken (about 37 % canary) and pause a healthy
    # canary. Unpinned, every run after the step is the new weight's choice, and the runs
    # before it are not (this replica's figures count the split from the step, too).
    config = service_config(agents_dir, state_dir)
    async with running_service(config, environ={}) as service:
        candidate = agent_document("bot", system="Canary.")
        analysis = {"interval": 0.1, "latency": None, "min_requests": 10**6}
        analysis["max_inconclusive"] = 10**5
        rollout = {"pin_sessions": pin, "analysis": analysis}
        await _start_canary(service, candidate, 10, **rollout)

        async def turn(session: str) -> str:
            body = {"input": "hi", "session_id": session}
            response = await service.client.post("/v1/agents/bot/invoke", json=body)
            assert response.status == 200
            return str((await response.json())["variant"])

        old = [f"old-{i}" for i in range(200)]
        first = [await turn(s) for s in old]
        service.write_agent(
            canary_document(candidate, 90, guard=NO_GUARD, **rollout),
            filename=canary_filename("bot"),
        )
        await service.registry.wait_for(
            lambda r: (c := r.entry("bot").canary) is not None and c.policy.weight == 90
        )

        def split() -> dict[str, Any] | None:
            checks = (service.registry.status("bot").get("analysis") or {}).get("checks", [])
            found = [c for c in checks if c["name"] == "sample_ratio"]
            return found[0] if found and found[0]["figures"]["weight"] == 90 else None

        # The split counts from the first check at the new weight: its runs come after it.
        await service.registry.wait_for(lambda r: split() is not None, within=20)
        again = [await turn(s) for s in old]
        new = [await turn(f"new-{i}") for i in range(100)]
        split_runs = new if pin else again + new

        def counted() -> bool:
            check = split()
            return check is not None and check["figures"]["routed"] >= len(split_runs)

        await service.registry.wait_for(lambda r: counted(), within=20)
        check = split()
        canary = service.registry.entry("bot").canary

    assert (again == first) is pin  # pinned, the conversations kept their variant
    assert 0.03 < first.count("canary") / len(first) < 0.2
    assert check is not None and check["verdict"] != "fail", check
    assert check["figures"]["routed"] == len(split_runs)
    assert check["figures"]["canary_routed"] == split_runs.count("canary")
    assert canary is not None and canary.policy.paused is None
