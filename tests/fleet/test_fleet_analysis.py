"""Canary analysis across a real fleet: two replicas behind nginx, the fleet's figures in a
real Prometheus scraping both, the scripted model behind every version. Each test
publishes an agent and its canary into the fleet's Nacos group, drives traffic through
nginx, and watches every replica, the canary's trail of decisions and the webhooks.

A budget's pause (``rollout.budget``) is one more scenario of the same shape: a canary on
the model every replica's ``models.prices`` prices, a load, then the pause by ``budget``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest

from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, Fail, Reply, ScriptedModelServer
from tests.support.analysed_fleet import (
    ADMIN,
    ADMIN_KEY,
    PRICED_MODEL,
    WEBHOOK_SECRET,
    AnalysedFleet,
    analysed_fleet,
    canary_state,
    checked,
    driven,
    equals,
    fleet_load,
    per_instance,
    publish_canary,
    replica_spend,
    until_paused,
    up_of,
)
from tests.support.fleet import until
from tests.support.nacos import NacosAdmin
from tests.support.process import DYNAGENT

from .test_fleet import unique

pytestmark = [pytest.mark.slow]

INTERVAL = 0.5
"""Seconds between two checks of a canary on each replica."""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AnalysedFleet]:
    with analysed_fleet(tmp_path_factory.mktemp("analysed")) as running:
        yield running


@pytest.fixture
async def nacos(fleet: AnalysedFleet) -> AsyncIterator[NacosAdmin]:
    async with NacosAdmin(fleet.fleet.nacos_url) as admin:
        yield admin


ERRORS_SHARE = 4
"""The failing canary fails one call in this many (25 % against the stable's 0 %)."""
DETECTED_BY = 120
"""Canary requests by which the sequential test pauses it. With exact figures and a
random even split, ``error_rate_check`` at 95 % first fails at 49 to 57 canary requests
(300 simulated splits, every request checked). The checks see the figures only as often
as Prometheus scrapes (``SCRAPE``, 0.5 s) and check (``INTERVAL``, 0.5 s): the failing
check counts what arrived since the one before it too. With the paced load (at most 10
canary requests a second) that is 5 or 10 on a quiet machine (runs showed 55 to 89 at
twice this pace), and a busy machine's seconds of delay between two looks stay within
the 63 left."""


async def test_a_canary_with_a_higher_error_rate_is_paused_fleet_wide_by_the_sequential_test(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("worse")
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    canary_steps = [Fail(500)] + [Reply("canary")] * (ERRORS_SHARE - 1)
    model_server.script(f"{name}-canary", canary_steps, cycle=True)
    analysis = fleet.analysis(interval=INTERVAL, latency=None, max_inconclusive=10_000)
    revision = await publish_canary(
        fleet, nacos, http, model_server, name, weight=50, analysis=analysis
    )
    await fleet.everywhere(http, name, checked, "a first check")

    load = fleet_load(fleet, name, paced=True)

    async def paused() -> None:
        await until_paused(fleet, http, name, "analysis")

    await driven(load, paused)
    model_server.end_cycle(f"{name}-canary")
    model_server.end_cycle(DEFAULT_MODEL)

    statuses = await fleet.statuses(http, name)
    assert [s["canary"]["state"] for s in statuses] == ["pulled", "pulled"]
    failed = [s["analysis"] for s in statuses if s["analysis"]["verdict"] == "fail"]
    assert failed, [s["analysis"] for s in statuses]
    for analysis_status in failed:  # the replicas that judged it themselves
        assert analysis_status["source"] == "prometheus"
        (check,) = [c for c in analysis_status["checks"] if c["name"] == "error_rate"]
        figures = check["figures"]
        assert check["verdict"] == "fail" and check["interval"][0] > 0, check
        assert figures["stable_errors"] == 0 and figures["canary_errors"] > 0, figures
        assert figures["canary_requests"] < DETECTED_BY, figures
        # Fleet-wide: the check's count is both replicas' counts at that moment, added up.
        counts = await per_instance(http, fleet, name, analysis_status["checked_at"])
        traffic = [s["analysis"] for s in statuses]
        assert len(counts) == 2 and all(c > 0 for c in counts.values()), (counts, traffic)
        assert max(counts.values()) < figures["canary_requests"] <= sum(counts.values()), (
            counts,
            traffic,
        )

    (pause,) = [e for e in await fleet.history(http, name) if e["action"] == "pause"]
    assert pause["by"] == "analysis" and "error_rate: error rate higher" in pause["reason"]
    canary_answers = [a for a in load.answers if a.variant == "canary"]
    assert {a.revision for a in canary_answers} == {revision}
    print(
        f"\nfailing canary paused after {len(canary_answers)} canary answers "
        f"(checks failed at {[f['checks'][0]['figures']['canary_requests'] for f in failed]})"
    )


async def test_an_equal_canary_is_never_paused_and_takes_its_steps(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("equal")
    model_server.script(DEFAULT_MODEL, [Reply("same")], cycle=True)
    model_server.script(f"{name}-canary", [Reply("same")], cycle=True)
    analysis = fleet.analysis(
        interval=INTERVAL, latency={"floor_ms": 1000}, max_inconclusive=10_000
    )
    await publish_canary(
        fleet,
        nacos,
        http,
        model_server,
        name,
        steps=[50, 80],
        step_after={"requests": 10},
        analysis=analysis,
    )
    load = fleet_load(fleet, name)
    stepped: list[float] = []

    async def long_run() -> None:
        async def done() -> bool:
            statuses = await fleet.statuses(http, name)
            assert not any((s["canary"] or {}).get("pulled") for s in statuses), statuses
            if all(s["canary"]["weight"] == 80 for s in statuses) and not stepped:
                stepped.append(len(load.answers))
            verdicts = {(s.get("analysis") or {}).get("verdict") for s in statuses}
            enough = bool(stepped) and len(load.answers) >= max(400, stepped[0] + 200)
            return enough and verdicts == {"pass"}

        await until(done, 150, "400 answers, 200 of them after the step, and a pass")

    await driven(load, long_run)
    model_server.end_cycle(f"{name}-canary")
    model_server.end_cycle(DEFAULT_MODEL)

    assert load.failures() == []
    statuses = await fleet.statuses(http, name)
    assert [(s["canary"]["weight"], s["canary"]["pulled"]) for s in statuses] == [(80, None)] * 2
    history = await fleet.history(http, name)
    trail = [(e["action"], e["by"], e.get("from"), e.get("to")) for e in history]
    assert trail == [("step", "rollout", 50, 80)]
    assert {s["analysis"]["source"] for s in statuses} == {"prometheus"}
    print(f"\nequal canary: stepped after {stepped[0]} answers, {len(load.answers)} in all")


async def test_a_replica_missing_from_a_scrape_keeps_its_requests_in_the_fleet_figures(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("stalled")
    # No verdict, ever: the test watches the figures the checks read.
    analysis = fleet.analysis(
        interval=INTERVAL, latency=None, sample_ratio=False, min_requests=10**6
    )
    analysis["max_inconclusive"] = 10**5
    await publish_canary(fleet, nacos, http, model_server, name, weight=50, analysis=analysis)
    model_server.script(f"{name}-canary", [Reply("canary")] * 6)
    await fleet.everywhere(http, name, checked, "a first check")  # counting from zero
    keys = [k for k in (str(i) for i in range(1000)) if picks_canary(name, k, 50)]
    for n, key in enumerate(keys[:6]):  # three canary runs on each replica
        headers = {**fleet.caller, "X-Canary-Key": key}
        url = fleet.replica_urls[n % 2]
        async with http.post(
            f"{url}/v1/agents/{name}/invoke", json={"input": "hi"}, headers=headers
        ) as response:
            assert (response.status, response.headers["X-Agent-Variant"]) == (200, "canary")
    seen: list[int] = []

    async def checked_after(moment: float) -> bool:
        """Replica 1 has checked since ``moment``; what its check counted is in ``seen``."""
        status = await fleet.get(http, f"{fleet.replica_urls[0]}/v1/agents/{name}")
        analysis_status = status.get("analysis") or {}
        if (analysis_status.get("checked_at") or 0) <= moment:
            return False
        (check,) = [c for c in analysis_status["checks"] if c["name"] == "error_rate"]
        seen.append(check["figures"]["canary_requests"])
        return True

    async def counted_all() -> bool:
        return await checked_after(0) and seen[-1] == 6

    await until(counted_all, 30, "both replicas' canary runs in a check")
    seen.clear()
    stalled = fleet.replica_urls[1].removeprefix("http://")
    pid = fleet.fleet.replica_pid(2)
    os.kill(pid, signal.SIGSTOP)  # a replica stalls: its scrapes time out
    try:
        await until(lambda: equals(up_of(http, fleet, stalled), 0.0), 30, "a failed scrape")
        missed = time.time()
        await until(lambda: checked_after(missed), 30, "a check while it is missing")
    finally:
        os.kill(pid, signal.SIGCONT)
    await until(lambda: equals(up_of(http, fleet, stalled), 1.0), 30, "a scrape again")
    back = time.time()
    await until(lambda: checked_after(back), 30, "a check once it is back")
    assert seen[0] == seen[-1] == 6, seen  # neither forgotten nor counted from afresh


async def test_a_canary_with_too_little_traffic_holds_its_step_then_pauses_for_a_person(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("quiet")
    analysis = fleet.analysis(interval=INTERVAL, min_requests=50, max_inconclusive=10)
    await publish_canary(
        fleet,
        nacos,
        http,
        model_server,
        name,
        steps=[10, 50],
        step_after={"requests": 1},
        analysis=analysis,
    )
    keys = [str(k) for k in range(1000)]
    canary_keys = [k for k in keys if picks_canary(name, k, 10)][:4]
    stable_keys = [k for k in keys if not picks_canary(name, k, 10)][:4]
    model_server.script(f"{name}-canary", [Reply("canary")] * 4)
    model_server.script(DEFAULT_MODEL, [Reply("stable")] * 4)
    for key in canary_keys + stable_keys:  # enough for the step, too few for a verdict
        headers = {**fleet.caller, "X-Canary-Key": key}
        async with http.post(
            f"{fleet.url}/v1/agents/{name}/invoke", json={"input": "hi"}, headers=headers
        ) as response:
            assert response.status == 200
    statuses = await until_paused(fleet, http, name, "analysis", within=60)

    assert [s["canary"]["weight"] for s in statuses] == [10, 10]
    reason = statuses[0]["canary"]["pulled"]["reason"]
    assert "inconclusive after 10 checks at 10 %" in reason and "too few requests" in reason
    assert {s["analysis"]["verdict"] for s in statuses} == {"inconclusive"}
    trail = [(e["action"], e["by"]) for e in await fleet.history(http, name)]
    assert trail == [("pause", "analysis")]


async def test_a_broken_split_pauses_the_canary_by_the_sample_ratio_check(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("split")
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    model_server.script(f"{name}-canary", [Reply("canary")], cycle=True)
    # The error rate stays inconclusive (too few requests), so only the split can decide.
    analysis = fleet.analysis(
        interval=INTERVAL, latency=None, min_requests=100_000, max_inconclusive=10_000
    )
    await publish_canary(
        fleet, nacos, http, model_server, name, weight=50, sticky_key="header", analysis=analysis
    )
    # A proxy in front stamps one routing key on every request: every caller lands on one
    # variant, whatever the weight says.
    load = fleet_load(fleet, name, headers={"X-Canary-Key": "stamped-by-a-proxy"})

    async def paused() -> None:
        await until_paused(fleet, http, name, "analysis")

    await driven(load, paused)
    model_server.end_cycle(f"{name}-canary")
    model_server.end_cycle(DEFAULT_MODEL)

    statuses = await fleet.statuses(http, name)
    assert "sample_ratio: sample ratio mismatch" in statuses[0]["canary"]["pulled"]["reason"]
    assert load.failures() == [], [(a.status, a.body) for a in load.failures()][:5]
    failed = [c for s in statuses for c in s["analysis"]["checks"] if c["verdict"] == "fail"]
    assert failed and {c["name"] for c in failed} == {"sample_ratio"}, failed
    assert all(c["figures"]["canary_share"] in (0.0, 1.0) for c in failed), failed
    trail = [(e["action"], e["by"]) for e in await fleet.history(http, name)]
    assert trail == [("pause", "analysis")]


async def _rollout_command(fleet: AnalysedFleet, action: str, name: str) -> dict[str, Any]:
    """``dynagent rollout ACTION NAME`` against nginx with the admin key; its status."""
    command = [str(DYNAGENT), "rollout", action, name, "--url", fleet.url, "--api-key", ADMIN_KEY]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    status: dict[str, Any] = json.loads(done.stdout)
    return status


async def test_approval_holds_a_progressive_rollout_on_every_replica_until_approved(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("approved")
    model_server.script(f"{name}-canary", [Reply("canary")] * 2)
    revision = await publish_canary(
        fleet,
        nacos,
        http,
        model_server,
        name,
        steps=[10, 50],
        step_after={"requests": 1},
        approval={"before_weight": 50},
    )
    canary_keys = [k for k in (str(i) for i in range(1000)) if picks_canary(name, k, 10)]
    for n, url in enumerate(fleet.replica_urls):  # each replica's step is due from now on
        headers = {**fleet.caller, "X-Canary-Key": canary_keys[n]}
        async with http.post(
            f"{url}/v1/agents/{name}/invoke", json={"input": "hi"}, headers=headers
        ) as response:
            assert (response.status, response.headers["X-Agent-Variant"]) == (200, "canary")

    def due_but_held(status: dict[str, Any]) -> bool:
        steps = status["canary"]["steps"]
        return bool(steps["healthy_requests"] >= 1 and steps["awaiting_approval"])

    await fleet.everywhere(http, name, due_but_held, "a due step awaiting approval")
    approved = await _rollout_command(fleet, "approve", name)
    assert approved["canary"]["weight"] == 10  # held until now
    assert approved["canary"]["steps"]["approved"]["by"] == ADMIN

    statuses = await fleet.everywhere(
        http, name, lambda s: s["canary"]["weight"] == 50, "the step to 50 %"
    )
    record = statuses[0]["canary"]["steps"]["approved"]
    assert record == {"by": ADMIN, "at": record["at"], "revision": revision}
    trail = [(e["action"], e["by"], e.get("to")) for e in await fleet.history(http, name)]
    assert trail == [("approve", ADMIN, None), ("step", "rollout", 50)]


async def test_webhooks_get_one_signed_delivery_per_event_from_the_whole_fleet(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("notified")
    revision = await publish_canary(fleet, nacos, http, model_server, name, weight=20)
    stable = (await fleet.statuses(http, name))[0]["revision"]
    for action, state in (("pause", "pulled"), ("resume", "serving")):
        async with http.post(
            f"{fleet.url}/v1/agents/{name}/rollout/{action}", headers=fleet.admin
        ) as response:
            assert response.status == 200, await response.text()
        await fleet.everywhere(http, name, canary_state(state), action)
    async with http.post(f"{fleet.url}/v1/agents/{name}/promote", headers=fleet.admin) as response:
        assert response.status == 200, await response.text()
    await fleet.everywhere(http, name, lambda s: s["canary"] is None, "the promotion")

    async def all_told() -> bool:
        told = {d.notice["event"] for d in fleet.receiver.of_agent(name)}
        return told >= {"published", "pause", "resume", "promote"}

    await until(all_told, 30, "every notice at the receiver")
    await fleet.webhooks_settled(http)
    deliveries = fleet.receiver.of_agent(name)
    assert all(d.signed(WEBHOOK_SECRET) for d in deliveries)
    told = sorted(
        (d.notice["event"], d.notice["revision"], d.notice.get("variant")) for d in deliveries
    )
    assert told == sorted(
        [
            ("published", stable, "stable"),
            ("published", revision, "canary"),
            ("pause", revision, None),
            ("resume", revision, None),
            ("promote", revision, None),
            ("published", revision, "stable"),  # the promoted canary, now the stable
        ]
    ), told
    ids = [d.headers["X-Dynagent-Delivery"] for d in deliveries]
    assert len(set(ids)) == len(ids)
    (pause,) = [d.notice for d in deliveries if d.notice["event"] == "pause"]
    assert (pause["by"], pause["reason"]) == (ADMIN, "paused by hand")


BUDGET_USD = 0.5
"""The canary's budget: some 70 canary runs of ``PRICED_MODEL`` (about 0.007 US dollars
each), so that neither replica alone, with about half of them, reaches it."""


async def test_a_canary_that_spends_its_budget_fleet_wide_is_paused_by_the_budget(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
) -> None:
    name = unique("spend")
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)
    model_server.script(PRICED_MODEL, [Reply("a priced canary answer")], cycle=True)
    budget = {"usd": BUDGET_USD, "per": "rollout", "interval": INTERVAL}
    analysis = fleet.analysis(interval=60, latency=None, max_inconclusive=10_000)
    await publish_canary(
        fleet,
        nacos,
        http,
        model_server,
        name,
        canary_model=PRICED_MODEL,
        weight=50,
        analysis=analysis,
        budget=budget,
    )
    load = fleet_load(fleet, name, paced=True)

    async def paused() -> None:
        await until_paused(fleet, http, name, "budget")

    await driven(load, paused)
    model_server.end_cycle(PRICED_MODEL)
    model_server.end_cycle(DEFAULT_MODEL)

    statuses = await fleet.statuses(http, name)
    assert [s["canary"]["state"] for s in statuses] == ["pulled", "pulled"]
    judged = [s["canary"]["budget"] for s in statuses if s["canary"]["budget"]["exceeded"]]
    assert judged, [s["canary"]["budget"] for s in statuses]
    for status in judged:  # read from Prometheus: the fleet's spend, not one replica's
        assert status["source"] == "prometheus" and status["spent_usd"] >= BUDGET_USD, status
    # It paused at the budget, not before, on what the two replicas spent together:
    # neither one had spent the budget alone.
    spent = await replica_spend(http, fleet, name)
    assert all(0 < own < BUDGET_USD for own in spent), spent
    assert BUDGET_USD <= sum(spent) < 2 * BUDGET_USD, spent
    (pause,) = [e for e in await fleet.history(http, name) if e["action"] == "pause"]
    assert pause["by"] == "budget" and "budget" in pause["reason"], pause
    canary_answers = [a for a in load.answers if a.variant == "canary"]
    print(
        f"\nbudget of {BUDGET_USD} USD: paused after {len(canary_answers)} canary answers; "
        f"the replicas spent {[round(s, 4) for s in spent]}"
    )
