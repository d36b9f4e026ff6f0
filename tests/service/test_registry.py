"""AgentRegistry swaps and statuses, and the DocumentApplier that feeds it from a source."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dynagent import Agent, AgentBuilder, AgentNotFound, ConfigError, SourceInfo, load_spec
from dynagent.exceptions import NotFound
from dynagent.factories.base import DocumentApplier
from dynagent.registry.events import AgentRefused, AgentRemoved, AgentSwapped, RegistryEvent
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.table import AgentUnavailable
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec

BUILDER = AgentBuilder()


def spec(name: str, system: str = "You help.") -> AgentSpec:
    return load_spec({"name": name, "model": {"provider": "test"}, "prompt": {"system": system}})


def agent(name: str, system: str = "You help.") -> Agent:
    return BUILDER.build(spec(name, system))


@pytest.fixture
def registry() -> AgentRegistry:
    return AgentRegistry()


@pytest.fixture
def told(registry: AgentRegistry) -> list[RegistryEvent]:
    heard: list[RegistryEvent] = []
    registry.listeners.append(heard.append)
    return heard


def test_put_serves_an_agent_and_reports_its_status(
    registry: AgentRegistry, told: list[RegistryEvent]
) -> None:
    bot = agent("bot")
    assert registry.table.put(bot) is True
    status = registry.entry("bot").status()
    assert isinstance(status.pop("loaded_at"), float)
    assert status == {
        "name": "bot",
        "state": "serving",
        "revision": bot.revision,
        "description": "",
        "source": {"kind": "code", "location": ""},
        "factory": "default",
        "last_error": None,
        "canary": None,
        "traffic": {},
    }
    full = registry.status("bot")
    assert isinstance(full.pop("loaded_at"), float)
    assert isinstance(full["revisions"][0].pop("loaded_at"), float)
    assert full == {
        **status,
        "revisions": [
            {
                "revision": bot.revision,
                "variant": "stable",
                "factory": "default",
                "source": {"kind": "code", "location": ""},
            }
        ],
    }
    assert (registry.get("bot"), registry.route("bot")) == (bot, (bot, "stable"))
    assert (registry.changes, told) == (1, [AgentSwapped("bot", bot.revision, None)])


def test_putting_the_serving_revision_again_changes_nothing(
    registry: AgentRegistry, told: list[RegistryEvent]
) -> None:
    first = agent("bot")
    registry.table.put(first)
    assert registry.table.put(agent("bot")) is False
    assert registry.get("bot") is first
    assert (registry.changes, told) == (1, [AgentSwapped("bot", first.revision, None)])


def test_the_same_revision_from_a_truer_source_updates_the_status_only(
    registry: AgentRegistry, told: list[RegistryEvent]
) -> None:
    snapshot = SourceInfo("nacos", "public/AGENTS/bot.agent.yaml", {"from": "snapshot"})
    live = SourceInfo("nacos", "public/AGENTS/bot.agent.yaml", {"md5": "abc"})
    registry.table.put(BUILDER.build(spec("bot"), source=snapshot))
    again = BUILDER.build(spec("bot"), source=live)
    assert registry.table.put(again) is False  # not a swap: the content is the same
    assert registry.get("bot") is again
    assert registry.status("bot")["source"] == {
        "kind": "nacos",
        "location": "public/AGENTS/bot.agent.yaml",
        "md5": "abc",
    }
    assert [r["source"] for r in registry.status("bot")["revisions"]] == [snapshot.as_dict()]
    assert told == [AgentSwapped("bot", again.revision, None)]


def test_a_new_revision_replaces_the_old_one(registry: AgentRegistry) -> None:
    registry.table.put(agent("bot", "Old."))
    new = agent("bot", "New.")
    assert registry.table.put(new) is True
    assert registry.get("bot") is new


def test_a_refused_definition_keeps_the_serving_one(
    registry: AgentRegistry, told: list[RegistryEvent]
) -> None:
    good = agent("bot")
    registry.table.put(good)
    registry.table.fail("bot", ConfigError("unknown tool", source="bot.yaml", agent="bot"))

    assert registry.get("bot") is good
    error = registry.entry("bot").status()["last_error"]
    assert isinstance(error.pop("at"), float)
    assert error == {
        "source": "bot.yaml",
        "path": "",
        "message": "agent 'bot' bot.yaml: unknown tool",
    }
    refusal = registry.entry("bot").last_error
    assert refusal is not None
    assert told == [AgentSwapped("bot", good.revision, None), AgentRefused("bot", refusal)]

    assert registry.table.put(agent("bot")) is False  # the same text again: the error is gone
    assert registry.entry("bot").last_error is None
    assert registry.changes == 3


def test_a_name_that_never_built_is_unavailable(registry: AgentRegistry) -> None:
    registry.table.fail("bot", ConfigError("invalid agent definition", source="bot.yaml"))
    assert registry.entry("bot").status()["state"] == "refused"
    with pytest.raises(AgentUnavailable) as caught:
        registry.route("bot")
    assert (
        caught.value.message
        == "agent 'bot' has no valid version: bot.yaml: invalid agent definition"
    )
    assert caught.value.kind == "unavailable"


def test_removal_and_unknown_names(registry: AgentRegistry, told: list[RegistryEvent]) -> None:
    bot = agent("bot")
    registry.table.put(bot)
    registry.table.remove("bot")
    registry.table.remove("bot")
    registry.table.remove("never-there")
    assert ("bot" in registry, len(registry), registry.changes) == (False, 0, 2)
    assert told == [AgentSwapped("bot", bot.revision, None), AgentRemoved("bot", "")]
    for lookup in (registry.get, registry.entry, registry.route):
        with pytest.raises(AgentNotFound):
            lookup("bot")


def test_a_canary_pin_without_a_canary_is_not_found(registry: AgentRegistry) -> None:
    bot = agent("bot")
    registry.table.put(bot)
    with pytest.raises(NotFound) as caught:
        registry.route("bot", pin="canary")
    assert (caught.value.kind, caught.value.message) == ("not_found", "agent 'bot' has no canary")
    assert registry.route("bot", pin="stable") == (bot, "stable")


def test_entries_iterate_by_name(registry: AgentRegistry) -> None:
    for name in ("zeta", "alpha", "mid"):
        registry.table.put(agent(name))
    assert [e.name for e in registry] == ["alpha", "mid", "zeta"]


async def test_wait_for_wakes_on_the_change_that_makes_it_true(registry: AgentRegistry) -> None:
    seen: list[int] = []

    def has_two(r: AgentRegistry) -> bool:
        seen.append(r.changes)
        return len(r) == 2

    waiter = asyncio.create_task(registry.wait_for(has_two))
    await asyncio.sleep(0)  # let the waiter check once and park
    registry.table.put(agent("one"))
    await asyncio.sleep(0)
    registry.table.put(agent("two"))
    await asyncio.wait_for(waiter, 1)
    assert seen == [0, 1, 2]


async def test_wait_for_returns_at_once_when_already_true(registry: AgentRegistry) -> None:
    registry.readiness.mark_ready()
    await registry.wait_for(lambda r: r.ready, within=0)
    assert registry.changes == 1


async def test_wait_for_gives_up_after_its_time(registry: AgentRegistry) -> None:
    with pytest.raises(TimeoutError):
        await registry.wait_for(lambda r: "bot" in r, within=0.01)


def document(key: str, text: str | None, error: str | None = None) -> Document:
    return Document(key, text, "yaml", SourceInfo("file", f"/agents/{key}"), error)


def yaml_of(name: str, system: str = "You help.") -> str:
    return f"name: {name}\nmodel: {{provider: test}}\nprompt: {{system: {system}}}\n"


@pytest.fixture
def applier(registry: AgentRegistry) -> DocumentApplier:
    def build(spec: AgentSpec, doc: Document) -> Agent:
        return BUILDER.build(spec, source=doc.info)

    return DocumentApplier(registry, build)


def statuses(registry: AgentRegistry) -> list[tuple[str, str, Any]]:
    return [
        (s["name"], s["state"], s["last_error"] and s["last_error"]["source"])
        for s in (e.status() for e in registry)
    ]


async def test_the_applier_follows_a_document_through_its_life(
    registry: AgentRegistry, applier: DocumentApplier
) -> None:
    await applier.apply(document("a.yaml", yaml_of("bot")))
    assert registry.get("bot").source.location == "/agents/a.yaml"
    await applier.apply(document("a.yaml", yaml_of("renamed")))  # the name inside changed
    assert statuses(registry) == [("renamed", "serving", None)]
    await applier.apply(document("a.yaml", None, error="file larger than 1000000 bytes"))
    assert statuses(registry) == [("renamed", "serving", "/agents/a.yaml")]
    error = registry.entry("renamed").last_error
    assert error is not None
    assert error.message.endswith("file larger than 1000000 bytes")
    await applier.apply(document("a.yaml", None))
    assert statuses(registry) == []


async def test_the_applier_refuses_a_second_claim_on_a_name(
    registry: AgentRegistry, applier: DocumentApplier
) -> None:
    await applier.apply(document("a.yaml", yaml_of("bot", "First.")))
    first = registry.get("bot")
    await applier.apply(document("b.yaml", yaml_of("bot", "Second.")))
    assert registry.get("bot") is first
    # The refusal is b.yaml's own, under its name: the healthy bot shows no error.
    assert statuses(registry) == [("b", "refused", "/agents/b.yaml"), ("bot", "serving", None)]

    await applier.apply(document("b.yaml", yaml_of("other")))  # b.yaml gives up the claim
    assert statuses(registry) == [("bot", "serving", None), ("other", "serving", None)]


async def test_a_refused_document_leaves_nothing_behind_once_gone(
    registry: AgentRegistry, applier: DocumentApplier
) -> None:
    await applier.apply(document("draft.yaml", "name: draft\nprompt: {}\n"))
    assert statuses(registry) == [("draft", "refused", "/agents/draft.yaml")]
    await applier.apply(document("draft.yaml", "name: [\n"))  # still broken
    await applier.apply(document("draft.yaml", None))
    assert statuses(registry) == []


async def test_canary_documents_are_served_beside_the_stable(
    registry: AgentRegistry, applier: DocumentApplier, told: list[RegistryEvent]
) -> None:
    await applier.apply(document("bot.yaml", yaml_of("bot", "Stable.")))
    await applier.apply(document("bot.canary.yaml", yaml_of("bot", "New.")))  # no rollout
    error = registry.entry("bot").last_error
    assert error is not None
    assert (error.path, error.source) == ("rollout", "/agents/bot.canary.yaml")
    assert registry.entry("bot").canary is None

    await applier.apply(
        document("bot.canary.yaml", yaml_of("bot", "New.") + "rollout: {weight: 5}\n")
    )
    canary = registry.entry("bot").canary
    assert canary is not None
    assert (canary.agent.spec.prompt.system, canary.policy.weight, canary.serving) == (
        "New.",
        5,
        True,
    )
    assert registry.entry("bot").last_error is None
    assert registry.route("bot", pin="canary") == (canary.agent, "canary")

    await applier.apply(document("bot.canary.yaml", None))
    assert (registry.entry("bot").canary, registry.get("bot").spec.prompt.system) == (
        None,
        "Stable.",
    )
    assert [(event.name, event.kind) for event in told] == [
        ("bot", "swapped"),
        ("bot", "refused"),
        ("bot", "canary"),
        ("bot", "canary_removed"),
    ]
