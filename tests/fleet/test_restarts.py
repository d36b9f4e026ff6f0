"""Restarts that drop nothing: under a steady load through nginx (whole and streamed answers,
of our API and of chat completions), a rolling restart of every replica
(``scripts/fleet.sh restart``) and a SIGTERM of one replica fail no request."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from tests.support import Reply, ScriptedModelServer, Slow
from tests.support.fleet import Fleet, exited, until
from tests.support.nacos import NacosAdmin, yaml_text
from tests.support.service import agent_document, parse_sse, revision_of

from .test_fleet import serving_everywhere, unique

pytestmark = [pytest.mark.slow]

ANSWER = "the same answer in five words"


@dataclass(frozen=True)
class Outcome:
    kind: str
    status: int
    """0 when the connection failed."""
    ok: bool
    detail: Any


def _whole(body: Any) -> bool:
    return bool(body.get("output") == ANSWER)


def _events(body: str) -> bool:
    events = parse_sse(body)
    return [n for n, _ in events][-1:] == ["run_finished"] and events[-1][1]["status"] == "ok"


def _chat(body: Any) -> bool:
    return bool(body["choices"][0]["message"]["content"] == ANSWER)


def _chunks(body: str) -> bool:
    events = [data for _, data in parse_sse(body)]
    text = "".join(
        (c["choices"][0]["delta"].get("content") or "") for c in events[:-1] if c["choices"]
    )
    return events[-1:] == ["[DONE]"] and text == ANSWER


def kinds(name: str) -> dict[str, tuple[str, dict[str, Any], Callable[[Any], bool]]]:
    """The four ways a caller asks: path, body and what a whole answer looks like."""
    chat = {"model": name, "messages": [{"role": "user", "content": "hi"}]}
    return {
        "invoke": (f"/v1/agents/{name}/invoke", {"input": "hi"}, _whole),
        "invoke-stream": (f"/v1/agents/{name}/invoke", {"input": "hi", "stream": True}, _events),
        "chat": ("/v1/chat/completions", chat, _chat),
        "chat-stream": ("/v1/chat/completions", {**chat, "stream": True}, _chunks),
    }


@dataclass
class MixedLoad:
    """``workers`` callers, each going round the four kinds of request, until stopped."""

    http: aiohttp.ClientSession
    url: str
    name: str
    workers: int = 6
    outcomes: list[Outcome] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def __aenter__(self) -> MixedLoad:
        self._tasks = [asyncio.create_task(self._caller(n)) for n in range(self.workers)]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def until(self, count: int) -> None:
        async def enough() -> bool:
            return len(self.outcomes) >= count

        await until(enough, 60, f"{count} answers")

    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    async def _caller(self, n: int) -> None:
        cycle = itertools.islice(itertools.cycle(kinds(self.name).items()), n % 4, None)
        for kind, (path, body, whole) in cycle:
            if self._stop.is_set():
                return
            self.outcomes.append(await self._call(kind, path, body, whole))

    async def _call(
        self, kind: str, path: str, body: dict[str, Any], whole: Callable[[Any], bool]
    ) -> Outcome:
        try:
            async with self.http.post(f"{self.url}{path}", json=body) as response:
                text = await response.text()
                if response.status != 200:
                    return Outcome(kind, response.status, False, text)
                parsed = text if kind.endswith("stream") else await response.json()
                return Outcome(kind, 200, whole(parsed), text)
        except aiohttp.ClientError as exc:
            return Outcome(kind, 0, False, repr(exc))


async def steady_agent(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model: ScriptedModelServer
) -> str:
    """An agent on every replica whose model takes a moment and streams its answer slowly,
    so that runs of every kind are in flight whenever a replica is told to stop."""
    name = unique("steady")
    document = agent_document(name, model, system="Answer.", model={"name": name})
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(document))
    await serving_everywhere(http, fleet, name, revision_of(document))
    model.script(name, [Slow(0.05, Reply(ANSWER, gap=0.02))], cycle=True)
    return name


def nginx_errors(fleet: Fleet) -> str:
    """What nginx logged: why it answered 502 for a request that failed."""
    log = fleet.home / "nginx" / "error.log"
    return log.read_text(errors="replace")[-4000:] if log.exists() else "(no nginx error log)"


def summary(load: MixedLoad) -> str:
    by_kind = {k: sum(o.kind == k for o in load.outcomes) for k in kinds("-")}
    return f"{len(load.failures())} of {len(load.outcomes)} failed ({by_kind})"


async def test_a_rolling_restart_of_every_replica_under_load_fails_no_request(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = await steady_agent(fleet, nacos, http, model_server)
    before = [fleet.replica_pid(n) for n in range(1, 4)]
    async with MixedLoad(http, fleet.url, name) as load:
        await load.until(80)
        started = time.monotonic()
        await asyncio.to_thread(fleet.restart)
        took = time.monotonic() - started
        during = len(load.outcomes)
        await load.until(during + 80)  # the restarted replicas serve

    after = [fleet.replica_pid(n) for n in range(1, 4)]
    assert all(a != b for a, b in zip(after, before, strict=True)), (before, after)
    print(f"\nrolling restart of 3 replicas ({took:.1f} s) under load: {summary(load)}")
    assert load.failures() == [], nginx_errors(fleet)
    assert {o.kind for o in load.outcomes[80:during]} == set(kinds(name))


async def test_sigterm_of_one_replica_under_load_fails_no_request(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = await steady_agent(fleet, nacos, http, model_server)
    pid = fleet.replica_pid(2)
    async with MixedLoad(http, fleet.url, name) as load:
        await load.until(80)
        os.kill(pid, signal.SIGTERM)

        async def unready() -> bool:
            async with http.get(f"{fleet.replica_url(2)}/readyz") as response:
                return response.status == 503 and (await response.json())["status"] == "stopping"

        await until(unready, 10, "replica 2 answering /readyz 503 while it stops")

        async def gone() -> bool:
            return exited(pid)

        await until(gone, 30, "replica 2 exiting")
        stopped = len(load.outcomes)
        await load.until(stopped + 80)  # the two others carry the load

    print(f"\nSIGTERM of 1 of 3 replicas under load: {summary(load)}")
    assert load.failures() == [], nginx_errors(fleet)
    await asyncio.to_thread(fleet.start_replica, 2)
