"""Hot reload over HTTP: edits, broken edits, additions, removals, name clashes, renames."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from dynagent import ToolRegistry
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    BROKEN_DEFINITIONS,
    Gate,
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)


def without_times(status: dict[str, Any]) -> dict[str, Any]:
    """The status with its timestamps checked and taken out."""
    assert isinstance(status.pop("loaded_at"), float | None)
    if status["last_error"] is not None:
        assert isinstance(status["last_error"].pop("at"), float)
    for record in status.get("revisions", ()):
        assert isinstance(record.pop("loaded_at"), float)
    return status


def revision_record(revision: str, path: Path) -> dict[str, Any]:
    """An entry of the status' ``revisions``, timestamp taken out."""
    return {
        "revision": revision,
        "variant": "stable",
        "factory": "default",
        "source": {"kind": "file", "location": str(path)},
    }


def serving_status(
    name: str, revision: str, path: Path, error: Any = None, *, earlier: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The status of a file agent that has served ``earlier`` revisions (newest first)
    before ``revision``, and no request since it began serving."""
    return {
        "name": name,
        "state": "serving",
        "revision": revision,
        "description": "",
        "source": {"kind": "file", "location": str(path)},
        "factory": "default",
        "last_error": error,
        "canary": None,
        "traffic": {},
        "revisions": [revision_record(r, path) for r in (revision, *earlier)],
    }


async def status_of(service: RunningService, name: str) -> dict[str, Any]:
    response = await service.client.get(f"/v1/agents/{name}")
    assert response.status == 200
    return without_times(await response.json())


async def invoke(service: RunningService, name: str, text: str = "hi") -> tuple[int, Any]:
    response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": text})
    assert response.content_type == "application/json"
    return response.status, await response.json()


async def test_a_run_in_flight_finishes_on_the_revision_it_started_with(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    gate = Gate()
    old = agent_document("bot", model_server, system="Old prompt.", tools=["gate"])
    new = agent_document("bot", model_server, system="New prompt.", tools=["gate"])
    model_server.script(
        DEFAULT_MODEL, [CallTools([("gate", {})]), Reply("old answer"), Reply("new answer")]
    )
    write_agent(agents_dir, old)
    config = service_config(agents_dir, state_dir)
    tools = ToolRegistry.default({"gate": gate.tool})
    async with running_service(config, tools=tools) as service:

        async def first_run() -> tuple[int, str, Any]:
            async with service.client.post(
                "/v1/agents/bot/invoke", json={"input": "first"}
            ) as response:
                return response.status, response.headers["X-Agent-Revision"], await response.json()

        in_flight = asyncio.create_task(first_run())
        async with asyncio.timeout(10):
            await gate.entered.wait()
        service.write_agent(new)
        await service.wait_serving("bot", revision_of(new))
        gate.opened.set()
        status, header, body = await in_flight
        second = await service.client.post("/v1/agents/bot/invoke", json={"input": "second"})

        assert (status, header, body["revision"], body["output"], body["steps"]) == (
            200,
            revision_of(old),
            revision_of(old),
            "old answer",
            2,
        )
        assert second.headers["X-Agent-Revision"] == revision_of(new)
        assert {k: v for k, v in (await second.json()).items() if k in ("output", "revision")} == {
            "output": "new answer",
            "revision": revision_of(new),
        }
    # Both model calls of the first run saw the old prompt, even the one after the swap.
    assert [r["messages"][0] for r in model_server.requests] == [
        {"role": "system", "content": "Old prompt."},
        {"role": "system", "content": "Old prompt."},
        {"role": "system", "content": "New prompt."},
    ]


BROKEN = BROKEN_DEFINITIONS


@pytest.mark.parametrize("broken", BROKEN.values(), ids=list(BROKEN))
async def test_a_broken_edit_keeps_the_last_good_revision_until_fixed(
    broken: tuple[str, str, str], agents_dir: Path, state_dir: Path
) -> None:
    text, field, message = broken
    good = agent_document("bot", system="Good prompt.")
    fixed = agent_document("bot", system="Fixed prompt.")
    path = write_agent(agents_dir, good).resolve()
    async with running_service(service_config(agents_dir, state_dir)) as service:
        service.write_agent(text, filename="bot.yaml")
        await service.wait_error("bot", message)

        status = await status_of(service, "bot")
        error = status["last_error"]
        assert message in error.pop("message")
        assert status == serving_status(
            "bot", revision_of(good), path, {"source": str(path), "path": field}
        )
        code, body = await invoke(service, "bot")
        assert (code, body["revision"]) == (200, revision_of(good))

        service.write_agent(fixed)
        await service.wait_serving("bot", revision_of(fixed))
        assert await status_of(service, "bot") == serving_status(
            "bot", revision_of(fixed), path, earlier=(revision_of(good),)
        )


async def test_restoring_the_serving_text_clears_the_error(
    agents_dir: Path, state_dir: Path
) -> None:
    good = agent_document("bot")
    path = write_agent(agents_dir, good).resolve()
    async with running_service(service_config(agents_dir, state_dir)) as service:
        service.write_agent("name: bot\n: : :\n", filename="bot.yaml")
        await service.wait_error("bot", "not valid YAML")
        service.write_agent(good)
        await service.registry.wait_for(lambda r: r.entry("bot").last_error is None)
        assert await status_of(service, "bot") == serving_status("bot", revision_of(good), path)


async def test_adding_a_file_adds_an_agent_and_deleting_it_removes_it(
    agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, agent_document("first"))
    extra = agent_document("second", description="Added while serving.")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        path = service.write_agent(extra)
        await service.wait_serving("second", revision_of(extra))
        listed = await (await service.client.get("/v1/agents")).json()
        assert [a["name"] for a in listed["agents"]] == ["first", "second"]
        code, body = await invoke(service, "second", "hello")
        assert (code, body["agent"], body["output"]) == (
            200,
            "second",
            "[test model] you said: hello | prompt: You are a test agent.",
        )

        path.unlink()
        await service.registry.wait_for(lambda r: "second" not in r)
        missing = await service.client.get("/v1/agents/second")
        assert missing.status == 404
        assert (await missing.json())["error"]["type"] == "not_found"
        code, body = await invoke(service, "second")
        assert (code, body["error"]["type"]) == (404, "not_found")
        # A tombstone: when and why the agent went.
        assert re.fullmatch(
            r"agent 'second' was removed at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: its file was "
            rf"deleted \({re.escape(str(path))}\); GET /v1/agents lists the agents served",
            body["error"]["message"],
        ), body


async def test_a_file_broken_from_the_start_is_failed_until_fixed_or_deleted(
    agents_dir: Path, state_dir: Path
) -> None:
    async with running_service(service_config(agents_dir, state_dir)) as service:
        path = service.write_agent("name: newbie\nprompt: {}\n", filename="newbie.yaml").resolve()
        status = await service.wait_error("newbie", "invalid agent definition")
        assert without_times(status) == {
            "name": "newbie",
            "state": "refused",
            "revision": None,
            "description": "",
            "source": None,
            "factory": None,
            "last_error": {
                "source": str(path),
                "path": "prompt",
                "message": (
                    f"agent 'newbie' {path}: invalid agent definition (prompt: Value error, "
                    "give the system prompt as 'system' or a Nacos reference as 'ref')"
                ),
            },
            "canary": None,
            "traffic": {},
        }
        code, body = await invoke(service, "newbie")
        assert code == 503
        assert body["error"]["type"] == "unavailable"
        assert body["error"]["message"].startswith("agent 'newbie' has no valid version: ")

        path.unlink()
        await service.registry.wait_for(lambda r: "newbie" not in r)
        assert (await service.client.get("/v1/agents/newbie")).status == 404


async def test_fixing_a_broken_new_file_under_another_name_leaves_no_failed_ghost(
    agents_dir: Path, state_dir: Path
) -> None:
    helper = agent_document("helper")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        service.write_agent("prompt: {system: hi}\n", filename="draft.yaml")
        await service.wait_error("draft", "invalid agent definition")
        service.write_agent(helper, filename="draft.yaml")
        await service.wait_serving("helper", revision_of(helper))
        listed = await (await service.client.get("/v1/agents")).json()
        assert [(a["name"], a["state"]) for a in listed["agents"]] == [("helper", "serving")]


async def test_a_second_file_claiming_a_name_is_refused(agents_dir: Path, state_dir: Path) -> None:
    original = agent_document("bot", system="Original.")
    clash = agent_document("bot", system="Impostor.")
    first = write_agent(agents_dir, original, filename="a.yaml").resolve()
    async with running_service(service_config(agents_dir, state_dir)) as service:
        second = service.write_agent(clash, filename="b.yaml").resolve()
        # The refusal lands on the document's own entry, not on the healthy bot.
        status = await service.wait_error("b", "already defines")
        assert without_times(status) == {
            "name": "b",
            "state": "refused",
            "revision": None,
            "description": "",
            "source": None,
            "factory": None,
            "last_error": {
                "source": str(second),
                "path": "",
                "message": f"agent 'b' {second}: this document names agent 'bot', which "
                "a.yaml already defines; rename it (e.g. name: b) or delete it",
            },
            "canary": None,
            "traffic": {},
        }
        listed = await (await service.client.get("/v1/agents")).json()
        assert [(a["name"], a["state"]) for a in listed["agents"]] == [
            ("b", "refused"),
            ("bot", "serving"),
        ]
        assert await status_of(service, "bot") == serving_status(
            "bot", revision_of(original), first
        )

        second.unlink()
        await service.registry.wait_for(lambda r: "b" not in r)
        assert await status_of(service, "bot") == serving_status(
            "bot", revision_of(original), first
        )


async def test_an_atomic_rename_save_is_picked_up(agents_dir: Path, state_dir: Path) -> None:
    document = agent_document("bot", system="Before.")
    write_agent(agents_dir, document)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for n in range(3):
            document = agent_document("bot", system=f"Saved atomically, {n}.")
            service.write_agent(document, atomic=True)
            await service.wait_serving("bot", revision_of(document))
        assert sorted(p.name for p in agents_dir.iterdir()) == ["bot.yaml"]


async def test_renaming_a_file_keeps_its_agent_serving(agents_dir: Path, state_dir: Path) -> None:
    document = agent_document("bot")
    old_path = write_agent(agents_dir, document, filename="z-bot.yaml")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        new_path = (agents_dir / "a-bot.yaml").resolve()
        before = service.registry.changes
        old_path.rename(new_path)

        def moved(registry: Any) -> bool:
            return (
                registry.changes > before
                and "bot" in registry
                and (
                    registry.entry("bot").stable is not None
                    and registry.entry("bot").stable.source.location == str(new_path)
                )
            )

        await service.registry.wait_for(moved)
        assert await status_of(service, "bot") == serving_status(
            "bot", revision_of(document), new_path
        )
