"""A rebuild asked for while another change is under way (an MCP server's tools changed,
a prompt changed) builds the document as it stands when its turn comes: a definition
deleted or replaced meanwhile is never built again from the text it had before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from dynagent import Agent, AgentBuilder, SourceInfo
from dynagent.factories.base import DocumentApplier
from dynagent.registry.facade import AgentRegistry
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec

BUILDER = AgentBuilder()


def document(text: str | None) -> Document:
    return Document("bot.agent.yaml", text, "yaml", SourceInfo("file", "/agents/bot.agent.yaml"))


def definition(system: str) -> str:
    return f"name: bot\nmodel: {{provider: test}}\nprompt: {{system: {system}}}\n"


class GatedBuild:
    """Builds agents; while ``gate`` is clear a build waits for it (``entered`` says one does)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.gate.set()
        self.entered = asyncio.Event()
        self.built: list[str] = []

    async def __call__(self, spec: AgentSpec, doc: Document) -> Agent:
        self.entered.set()
        await self.gate.wait()
        self.built.append(spec.prompt.system or "")
        return BUILDER.build(spec, source=doc.info)


CHANGES = {
    "deleted": None,
    "redefined": definition("The newer one."),
}


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("route", ["server changed", "rebuild by key"])
async def test_a_rebuild_queued_behind_a_change_builds_what_the_change_left(
    change: str, route: str
) -> None:
    registry, build = AgentRegistry(), GatedBuild()
    rebuilds: list[Callable[[frozenset[str]], None]] = []
    applier = DocumentApplier(registry, build, rebuilds=rebuilds)
    await applier.apply(document(definition("The first one.")))

    async def rebuilt() -> None:
        if route == "server changed":
            [tell] = rebuilds
            tell(frozenset({"bot"}))
            await asyncio.gather(*applier._rebuilding)
        else:
            await applier.rebuild(["bot.agent.yaml"])

    def ask_rebuild() -> asyncio.Future[None]:
        return asyncio.ensure_future(rebuilt())

    build.gate.clear()
    build.entered.clear()
    under_way = ask_rebuild()
    await build.entered.wait()  # one rebuild holds the lock, inside its build
    changed = asyncio.ensure_future(applier.apply(document(CHANGES[change])))
    queued = ask_rebuild()  # asked while the change waits for its turn
    build.gate.set()
    await asyncio.gather(under_way, changed, queued)

    if change == "deleted":
        assert ("bot" in registry, build.built) == (False, ["The first one."] * 2)
    else:
        served = registry.get("bot").spec.prompt.system
        assert (served, build.built[-1]) == ("The newer one.", "The newer one.")


async def test_a_burst_of_rebuilds_of_one_agent_queues_one_behind_the_one_under_way() -> None:
    registry, build = AgentRegistry(), GatedBuild()
    rebuilds: list[Callable[[frozenset[str]], None]] = []
    applier = DocumentApplier(registry, build, rebuilds=rebuilds)
    await applier.apply(document(definition("The first one.")))
    [tell] = rebuilds
    build.gate.clear()
    build.entered.clear()
    tell(frozenset({"bot"}))
    await build.entered.wait()
    for _ in range(100):
        tell(frozenset({"bot"}))
    build.gate.set()
    while applier._rebuilding:
        await asyncio.gather(*applier._rebuilding)
    assert build.built == ["The first one."] * 3  # the load, the one under way, one more
