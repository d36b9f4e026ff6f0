"""Sustained concurrent load while agents are edited, broken, added, removed and canaried
through the file source: no request to an agent that exists fails, and no answer comes
from a revision that was never valid.

The precise rule for an agent removed meanwhile: a request to it answers 404
``not_found`` only if the agent was absent at some moment while the request was in
flight, and 200 only if it was present at some moment (a run that started keeps its
agent to the end). Every other answer is a failure. ``DYNAGENT_SOAK=1`` runs longer.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from dynagent.http.state import SERVICE
from dynagent.registry.table import HISTORY
from tests.support import Reply, ScriptedModelServer
from tests.support.service import Document, RunningService, agent_document, revision_of

from .conftest import SOAK, Serve

pytestmark = pytest.mark.timeout(900 if SOAK else 120)

CLIENTS = 8
REQUESTS = 20_000 if SOAK else 1_200
"""Requests at least; the load also lasts as long as the churn."""
ROUNDS = 60 if SOAK else 8
"""Churn rounds: edits (more than the registry's history), breaks, canaries, add/remove."""


@dataclass
class Presence:
    """When each agent name was served (monotonic times), and every valid revision."""

    spans: dict[str, list[list[float]]] = field(default_factory=dict)
    revisions: dict[str, set[str]] = field(default_factory=dict)

    def added(self, name: str) -> None:
        self.spans.setdefault(name, []).append([time.monotonic(), float("inf")])

    def removed(self, name: str) -> None:
        self.spans[name][-1][1] = time.monotonic()

    def valid(self, document: Document) -> None:
        self.revisions.setdefault(document["name"], set()).add(revision_of(document))

    def present_during(self, name: str, start: float, end: float) -> bool:
        return any(begin <= end and start <= until for begin, until in self.spans.get(name, []))

    def absent_during(self, name: str, start: float, end: float) -> bool:
        spans = sorted(self.spans.get(name, []))
        gaps = [(-1.0, spans[0][0])] if spans else [(-1.0, float("inf"))]
        gaps += [(a[1], b[0]) for a, b in itertools.pairwise(spans)]
        gaps += [(spans[-1][1], float("inf"))] if spans else []
        return any(begin <= end and start <= until for begin, until in gaps if begin < until)


@dataclass(frozen=True)
class Answer:
    name: str
    start: float
    end: float
    status: int
    body: dict[str, Any]
    revision: str | None
    variant: str | None


class Churn:
    """Edits the agent files, and records what was valid when."""

    def __init__(self, service: RunningService, server: ScriptedModelServer) -> None:
        self.service = service
        self.presence = Presence()
        self.steady = [
            agent_document("steady-offline", tools=["calculator"]),
            agent_document("steady-scripted", server),
        ]
        self.ephemeral: list[str] = []
        """Ephemeral agents present now, oldest first."""
        self.recent = ["ephemeral-0"]
        """The last ephemeral names added, present or not: what the clients ask for."""

    async def put(self, document: Document) -> None:
        self.presence.valid(document)
        self.service.write_agent(document, atomic=True)
        await self.service.wait_serving(document["name"], revision_of(document))

    async def start(self) -> None:
        for document in self.steady:
            await self.put(document)
            self.presence.added(document["name"])

    async def run(self) -> None:
        for round_ in range(ROUNDS):
            await self.start_canary(round_)
            await self.add(f"ephemeral-{round_}")
            for document in self.steady:
                for edit in range(HISTORY // 4 + 1):  # past the history bound over the rounds
                    await self.put({**document, "description": f"round {round_} edit {edit}"})
            await self.broken_edit(round_)
            if len(self.ephemeral) > 1:
                await self.remove(self.ephemeral.pop(0))
            await self.stop_canary()
        while self.ephemeral:
            await self.remove(self.ephemeral.pop(0))

    async def broken_edit(self, round_: int) -> None:
        name = self.steady[round_ % 2]["name"]
        self.service.write_agent(f"name: {name}\nprompt: [broken", filename=f"{name}.yaml")
        await self.service.wait_error(name, "not valid YAML")
        await self.put({**self.steady[round_ % 2], "description": f"fixed {round_}"})

    async def start_canary(self, round_: int) -> None:
        candidate = {**self.steady[0], "description": f"canary {round_}"}
        self.presence.valid(candidate)
        self.service.write_agent(
            {**candidate, "rollout": {"weight": 50}}, filename="steady-offline.canary.yaml"
        )
        revision = revision_of(candidate)
        await self.service.registry.wait_for(lambda r: self.canary_revision() == revision)

    async def stop_canary(self) -> None:
        assert self.service.folder is not None
        (self.service.folder / "steady-offline.canary.yaml").unlink()
        await self.service.registry.wait_for(lambda r: self.canary_revision() is None)

    def canary_revision(self) -> str | None:
        canary = self.service.registry.entry("steady-offline").canary
        return canary.agent.revision if canary else None

    async def add(self, name: str) -> None:
        await self.put(agent_document(name, tools=["calculator"]))
        self.presence.added(name)
        self.ephemeral.append(name)
        self.recent = [*self.recent[-2:], name]

    async def remove(self, name: str) -> None:
        assert self.service.folder is not None
        (self.service.folder / f"{name}.yaml").unlink()
        await self.service.registry.wait_for(lambda r: name not in r)
        self.presence.removed(name)

    def names(self) -> Iterator[str]:
        while True:
            yield from [d["name"] for d in self.steady]
            yield from self.recent


async def client(
    http: aiohttp.ClientSession, url: str, churn: Churn, done: asyncio.Event, answers: list[Answer]
) -> None:
    names = churn.names()
    while not done.is_set() or len(answers) < REQUESTS:
        name = next(names)
        start = time.monotonic()
        async with http.post(f"{url}/v1/agents/{name}/invoke", json={"input": "2+2?"}) as response:
            body = await response.json()
            end = time.monotonic()
            headers = response.headers
        answers.append(
            Answer(
                name,
                start,
                end,
                response.status,
                body,
                headers.get("X-Agent-Revision"),
                headers.get("X-Agent-Variant"),
            )
        )


def failures(answers: list[Answer], presence: Presence) -> list[Answer]:
    wrong = []
    for answer in answers:
        ok = answer.status == 200 and answer.revision in presence.revisions.get(answer.name, ())
        if ok and presence.present_during(answer.name, answer.start, answer.end):
            continue
        gone = answer.status == 404 and answer.body["error"]["type"] == "not_found"
        removable = answer.name.startswith("ephemeral-")
        if gone and removable and presence.absent_during(answer.name, answer.start, answer.end):
            continue
        wrong.append(answer)
    return wrong


async def test_no_request_fails_while_agents_churn_under_load(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("4")], cycle=True)
    answers: list[Answer] = []
    done = asyncio.Event()
    async with serve() as service, aiohttp.ClientSession() as http:
        churn = Churn(service, model_server)
        await churn.start()
        load = [
            asyncio.create_task(client(http, service.url, churn, done, answers))
            for _ in range(CLIENTS)
        ]
        try:
            await churn.run()
        finally:
            done.set()
            await asyncio.gather(*load)
        registry = service.registry
        history = {
            name: len(registry.history(name)) for name in ("steady-offline", "steady-scripted")
        }
        leftovers = remembered_agents(service) - {"steady-offline", "steady-scripted"}

    counts: dict[tuple[str, int | str | None], int] = {}
    for answer in answers:
        kind = answer.name.rsplit("-", 1)[0]
        for key in ((kind, answer.status), (kind, answer.variant)):
            counts[key] = counts.get(key, 0) + 1
    print(f"\n{len(answers)} requests under churn ({ROUNDS} rounds): {counts}")
    assert len(answers) >= REQUESTS
    assert failures(answers, churn.presence) == []
    assert all(a.status == 200 for a in answers if a.name.startswith("steady-"))
    assert counts[("ephemeral", 200)] and counts[("ephemeral", 404)]  # both sides of the rule
    assert counts[("steady", "canary")] and counts[("steady", "stable")]
    served = {a.revision for a in answers if a.name == "steady-offline"}
    assert len(served) > ROUNDS  # the load really crossed the swaps
    assert max(history.values()) <= HISTORY
    assert leftovers == set()  # nothing kept about agents gone for good


def remembered_agents(service: RunningService) -> set[str]:
    """Agent names the service still keeps something about: metric series, the file
    source's record of files, the registry's figures."""
    names = {
        sample.labels["agent"]
        for family in service.app[SERVICE].metrics.registry.collect()
        for sample in family.samples
        if "agent" in sample.labels
    }
    source = service.app[SERVICE].factories["default"]._source  # type: ignore[attr-defined]
    names |= {path.name.split(".")[0] for path in source._seen}
    names |= {name for name, _ in service.registry.rollouts._stats}
    return names
