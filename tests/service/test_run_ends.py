"""A finished run's bookkeeping (metrics, series, spend, trace, the guard's evidence, its
log line) is applied in batches, off the request's path; whatever reads it settles it
first, so a reader sees every run that has ended."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from dynagent.core.run_ends import MOST_WAITING, SETTLE_AFTER, RunEnds
from dynagent.core.service import Service
from dynagent.http.state import SERVICE
from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, Fail, Reply, ScriptedModelServer
from tests.support.canary import canary_document, canary_filename
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)


async def test_run_ends_wait_for_the_others_of_their_time_then_apply_in_order() -> None:
    ends = RunEnds()
    applied: list[int] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    started = loop.time()
    for index in range(5):
        ends.add(applied.append, index)
    ends.add(done.set)
    assert applied == [] and len(ends) == 6
    await asyncio.wait_for(done.wait(), 5)
    assert applied == [0, 1, 2, 3, 4] and len(ends) == 0
    assert loop.time() - started >= SETTLE_AFTER * 0.9


async def test_a_failing_end_is_logged_and_the_others_applied(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ends = RunEnds()
    applied: list[str] = []

    def broken() -> None:
        raise ValueError("a bug in one run's bookkeeping")

    ends.add(applied.append, "before")
    ends.add(broken)
    ends.add(applied.append, "after")
    ends.settle()
    assert applied == ["before", "after"] and len(ends) == 0


async def test_unbatched_ends_and_too_many_waiting_apply_at_once() -> None:
    applied: list[int] = []
    RunEnds(batched=False).add(applied.append, 1)
    assert applied == [1]
    ends = RunEnds()
    for index in range(MOST_WAITING):
        ends.add(applied.append, index)
    assert len(applied) == 1 + MOST_WAITING and len(ends) == 0


def test_off_an_event_loop_an_end_applies_at_once() -> None:
    applied: list[int] = []
    RunEnds().add(applied.append, 1)
    assert applied == [1]


def core(service: RunningService) -> Service:
    """The running service, its run ends kept waiting until something reads them (a busy
    machine must not apply them on time while the test looks)."""
    found: Service = service.app[SERVICE]
    found.run_ends.after = 3600.0
    return found


async def invoke(service: RunningService, **body: Any) -> Any:
    response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi", **body})
    assert response.status == 200, await response.text()
    return response


@pytest.mark.parametrize("stream", [False, True])
async def test_every_reader_sees_the_runs_that_ended(
    stream: bool, model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    model_server.script(DEFAULT_MODEL, [Reply("hello")], cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        core(service)
        response = await invoke(service, stream=stream)
        await response.read()
        trace_id = response.headers["X-Trace-Id"]
        assert len(core(service).run_ends) == 1  # answered; its bookkeeping waits
        trace = await service.client.get(f"/v1/traces/{trace_id}")
        assert trace.status == 200
        assert len(core(service).run_ends) == 0
        await (await invoke(service, stream=stream)).read()
        metrics = await (await service.client.get("/metrics")).text()
        assert 'dynagent_requests_total{agent="bot",endpoint="invoke",outcome="ok"' in metrics
        assert [s for s in metrics.splitlines() if s.startswith("dynagent_requests_total")] == [
            'dynagent_requests_total{agent="bot",endpoint="invoke",outcome="ok",'
            'variant="stable"} 2.0'
        ]
        await (await invoke(service, stream=stream)).read()
        series = await (await service.client.get("/v1/agents/bot/series")).json()
        assert sum(series["variants"]["stable"]["requests"]) == 3
        await (await invoke(service, stream=stream)).read()
        status = await (await service.client.get("/v1/agents/bot")).json()
        assert status["traffic"]["stable"]["requests"] == 4


async def test_while_an_agent_has_a_canary_its_runs_are_counted_before_they_are_answered(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    """The guard acts on a canary's failed run before the run is answered; the runs that
    waited from before are counted first."""
    write_agent(agents_dir, agent_document("bot", model_server, system="Stable."))
    model_server.script(DEFAULT_MODEL, [Reply("hello")], cycle=True)
    model_server.script("gpt-canary", [Fail(500)], cycle=True)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        core(service)
        for _ in range(2):
            await invoke(service)
        assert len(core(service).run_ends) == 2  # no canary: nothing reads them yet
        candidate = agent_document(
            "bot", model_server, system="Canary.", model={"name": "gpt-canary", "retries": 0}
        )
        guard = {"min_requests": 1, "max_error_rate": 0}
        write_agent(
            agents_dir,
            canary_document(candidate, weight=50, guard=guard),
            filename=canary_filename("bot"),
        )
        await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
        key = next(k for k in (f"k{i}" for i in range(1000)) if picks_canary("bot", k, 50))
        failed = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Canary-Key": key}
        )
        assert failed.status == 502
        assert len(core(service).run_ends) == 0
        canary = service.registry.entry("bot").canary
        assert canary is not None and canary.pulled is not None  # before the answer came
        assert service.registry.rollouts.stats_of("bot")["stable"].requests == 2


async def test_settled_from_another_thread_the_loop_applies_them() -> None:
    """The stores the ends write belong to the loop; a reader on another thread (an
    exporter of the embedding program's own) has the loop apply them."""
    ends = RunEnds(after=3600.0)
    applied: list[tuple[int, bool]] = []
    done = asyncio.Event()
    loop_thread = threading.get_ident()

    def record(index: int) -> None:
        applied.append((index, threading.get_ident() == loop_thread))

    for index in range(3):
        ends.add(record, index)
    ends.add(done.set)
    await asyncio.to_thread(ends.settle)
    await asyncio.wait_for(done.wait(), 5)
    assert applied == [(0, True), (1, True), (2, True)]
