"""Thousands of mutated, truncated and type-confused agent documents through the
DocumentApplier and the registry (in-process), and a smaller batch through a real
FileSource: the service never crashes, never serves a definition that failed
validation, and keeps the last good revision with the refusal in its status."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import time
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path

import hypothesis.strategies as st
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from dynagent import AgentBuilder, load_spec
from dynagent.exceptions import BadRequest, ConfigError, RunError
from dynagent.factories.base import DocumentApplier
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.sources.base import Document
from dynagent.sources.files import FileSource
from dynagent.spec.agent import AgentSpec
from tests.support.budget import budget
from tests.support.threaded import loop_in_thread

from .mutations import SAMPLES, hostile_documents

ENVIRON = {"SECRET": "s3cr3t-value-never-shown", "HOME": "/home/x"}
TRIED: list[str] = []
REFUSAL = 200
"""A hostile document is applied (or refused) within this many times the good document
before it took, measured in the same example (an alias bomb expanded would take thousands)."""
RATIOS: list[float] = []


def good_text() -> str:
    return yaml.safe_dump({**SAMPLES["support-bot"], "name": "bot"}, sort_keys=False)


def predicted(text: str, fmt: str, builder: AgentBuilder) -> AgentSpec | None:
    """What the service should serve for ``text``: its spec, or None when refused."""
    try:
        spec = load_spec(text, fmt=fmt)  # type: ignore[arg-type]
        builder.build(spec)
    except ConfigError:
        return None
    return spec


async def cpu_seconds(work: Awaitable[object]) -> float:
    """The CPU this thread spent on ``work``: what the document itself costs, not the
    moments another process (the soak beside this tier, the other worker) held the core,
    nor a collection of garbage the earlier examples left."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        started = time.thread_time()
        await work
        return time.thread_time() - started
    finally:
        if collecting:
            gc.enable()


async def apply_one(text: str, fmt: str) -> None:
    registry = AgentRegistry()
    builder = AgentBuilder(environ=ENVIRON)

    def build(spec: AgentSpec, document: Document) -> Agent:
        return builder.build(spec, source=document.info)

    applier = DocumentApplier(registry, build)
    key = f"bot.{fmt}"
    info = SourceInfo("file", f"/agents/{key}")
    floor = await cpu_seconds(applier.apply(Document(key, good_text(), "yaml", info)))
    good = registry.get("bot")

    spent = await cpu_seconds(applier.apply(Document(key, text, fmt, info)))  # type: ignore[arg-type]
    ratio = spent / floor
    RATIOS.append(ratio)
    assert ratio < REFUSAL, f"one document took {ratio:.0f} times the good one to apply"

    statuses = [registry.status(entry.name) for entry in registry]
    json.dumps(statuses)  # what GET /v1/agents would send
    assert ENVIRON["SECRET"] not in json.dumps(statuses)
    spec = predicted(text, fmt, builder)
    if spec is None:  # refused: the good one serves on, the refusal in its status
        assert [s["name"] for s in statuses] == ["bot"]
        assert registry.get("bot") is good
        last_error = statuses[0]["last_error"]
        assert last_error["source"] == "/agents/" + key
        assert last_error["message"].strip()
        return
    served = registry.get(spec.name)  # accepted: the new definition, and only it
    assert [s["name"] for s in statuses] == [spec.name]
    assert (served.revision, statuses[0]["last_error"]) == (spec.revision, None)
    await run_once(served)


async def run_once(agent: Agent) -> None:
    """An accepted definition runs (offline model) or fails as a typed run error."""
    if agent.spec.model.provider == "openai":
        return  # would call a network endpoint
    with contextlib.suppress(RunError, BadRequest):
        await agent.run("hello", variables={"company": "ACME"})


@pytest.fixture(scope="module")
def tried() -> Iterator[list[str]]:
    yield TRIED
    print(f"\nhypothesis: {len(TRIED)} hostile agent documents applied", end="")
    print(f", the slowest in {max(RATIOS, default=0):.1f} times the good one's time")


@pytest.mark.fuzz
def test_hostile_documents_never_replace_the_last_good_revision(
    request: pytest.FixtureRequest, tried: list[str]
) -> None:
    @settings(
        max_examples=budget(request.config, default=300, long=5000),
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(document=hostile_documents())
    def check(document: tuple[str, str]) -> None:
        tried.append(document[1])
        asyncio.run(apply_one(*document))

    check()


@dataclass
class WatchedFolder:
    """A FileSource on a folder, feeding a DocumentApplier, on a loop of its own."""

    folder: Path
    loop: asyncio.AbstractEventLoop
    registry: AgentRegistry
    applied: asyncio.Queue[Document]
    last: bytes = b""

    def write(self, raw: bytes, filename: str) -> Document:
        """Write ``raw`` and wait until the watcher has applied what it read."""
        (self.folder / filename).write_bytes(raw)
        self.last = raw

        async def applied() -> Document:
            async with asyncio.timeout(10):
                return await self.applied.get()

        return asyncio.run_coroutine_threadsafe(applied(), self.loop).result()


@pytest.fixture(scope="module")
def watched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WatchedFolder]:
    folder = tmp_path_factory.mktemp("agents")
    (folder / "bot.yaml").write_text(good_text(), encoding="utf-8")
    with loop_in_thread() as loop:
        registry = AgentRegistry()
        builder = AgentBuilder(environ=ENVIRON)
        applier = DocumentApplier(registry, lambda spec, doc: builder.build(spec, source=doc.info))
        queue: asyncio.Queue[Document] = asyncio.Queue()
        source = FileSource(folder, settle=0.01)

        async def apply(document: Document) -> bool:
            accepted = await applier.apply(document)
            queue.put_nowait(document)
            return accepted

        async def start() -> None:
            await source.start(apply)
            await queue.get()  # the first load

        asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
        yield WatchedFolder(folder, loop, registry, queue, good_text().encode())
        asyncio.run_coroutine_threadsafe(source.stop(), loop).result(timeout=10)


@pytest.mark.fuzz
def test_hostile_files_never_replace_the_last_good_revision(
    request: pytest.FixtureRequest, watched: WatchedFolder, tried: list[str]
) -> None:
    """Through a real FileSource: raw bytes, so a truncation may split a UTF-8 sequence."""
    good = watched.registry.get("bot")

    @settings(
        max_examples=budget(request.config, default=40, long=500),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(document=hostile_documents(), cut=st.integers(min_value=0, max_value=64))
    def check(document: tuple[str, str], cut: int) -> None:
        text, fmt = document
        raw = text.encode()[: len(text.encode()) - cut] if cut else text.encode()
        if raw == watched.last or fmt == "json":
            return  # unchanged content hands nothing over; JSON would need another file
        tried.append("file")
        before = watched.registry.get("bot")
        applied = watched.write(raw, "bot.yaml")
        registry = watched.registry
        spec = (
            None
            if applied.text is None
            else predicted(applied.text, "yaml", AgentBuilder(environ=ENVIRON))
        )
        names = [entry.name for entry in registry]
        if spec is None:
            assert names == ["bot"] and registry.get("bot") is before
            assert registry.status("bot")["last_error"]["source"] == str(
                watched.folder / "bot.yaml"
            )
        else:
            assert names == [spec.name]
            assert registry.get(spec.name).revision == spec.revision
            # Back to the good definition for the next example.
            applied = watched.write(good_text().encode() + b"# again\n", "bot.yaml")
            assert registry.get("bot").revision == good.revision

    check()
