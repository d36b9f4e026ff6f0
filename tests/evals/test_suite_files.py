"""Suites beside file agents: shown in the agent's status, never changing what it serves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dynagent.evals import load_suite
from dynagent.registry.facade import AgentRegistry
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

SUITE = {
    "cases": [
        {"id": "greets", "input": "hello", "assert": [{"type": "icontains", "value": "hello"}]}
    ]
}
BROKEN = (
    "cases:\n  - id: greets\n    input: hello\n    assert:\n      - {type: contains, valu: x}\n"
)


def suite_text(suite: dict[str, Any]) -> str:
    return yaml.safe_dump(suite, sort_keys=False)


def evals_of(registry: AgentRegistry, name: str) -> dict[str, Any] | None:
    return registry.status(name).get("evals") if name in registry else None


def waiting(name: str, test: Callable[[dict[str, Any] | None], bool]) -> Any:
    return lambda registry: test(evals_of(registry, name))


def state_is(name: str, state: str) -> Any:
    return waiting(name, lambda e: e is not None and e["state"] == state)


async def status(service: RunningService, name: str) -> dict[str, Any]:
    response = await service.client.get(f"/v1/agents/{name}")
    assert response.status == 200
    body: dict[str, Any] = await response.json()
    return body


async def answers(service: RunningService, name: str) -> str:
    response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": "hello"})
    assert response.status == 200, await response.text()
    body = await response.json()
    return str(body["revision"])


def valid(suite: dict[str, Any], path: Path) -> dict[str, Any]:
    return {
        "state": "valid",
        "revision": load_suite(suite).revision,
        "cases": len(suite["cases"]),
        "needs_judge": 0,
        "source": str(path),
        "last_error": None,
    }


def without_times(evals: dict[str, Any]) -> dict[str, Any]:
    evals = dict(evals)
    assert isinstance(evals.pop("loaded_at"), float)
    if evals["last_error"] is not None:
        evals["last_error"] = dict(evals["last_error"])
        assert isinstance(evals["last_error"].pop("at"), float)
    return evals


async def test_a_suite_file_is_shown_refused_fixed_and_removed_while_the_agent_serves_on(
    agents_dir: Path, state_dir: Path
) -> None:
    agent = agent_document("bot")
    write_agent(agents_dir, agent)
    path = (agents_dir / "bot.evals.yaml").resolve()
    path.write_text(suite_text(SUITE), encoding="utf-8")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        await service.registry.wait_for(waiting("bot", lambda e: e is not None))
        await service.wait_serving("bot", revision_of(agent))
        first = await status(service, "bot")
        assert without_times(first["evals"]) == valid(SUITE, path)
        listed = await (await service.client.get("/v1/agents")).json()
        assert [a.get("evals") for a in listed["agents"]] == [first["evals"]]

        path.write_text(BROKEN, encoding="utf-8")
        await service.registry.wait_for(state_is("bot", "refused"))
        refused = await status(service, "bot")
        error: dict[str, Any] = refused["evals"]["last_error"]
        assert without_times(refused["evals"]) == {
            **valid(SUITE, path),  # the last good suite is kept
            "state": "refused",
            "last_error": {
                "source": str(path),
                "path": "cases[#1].assert[#1].value",
                "message": error["message"],
            },
        }
        assert (
            "unknown field 'valu' in cases[#1].assert[#1]; did you mean 'value'?"
            in (error["message"])
        )
        assert (refused["state"], refused["revision"], refused["last_error"]) == (
            "serving",
            revision_of(agent),
            None,
        )
        assert await answers(service, "bot") == revision_of(agent)

        fixed = {"cases": [*SUITE["cases"], {**SUITE["cases"][0], "id": "again"}]}
        path.write_text(suite_text(fixed), encoding="utf-8")
        await service.registry.wait_for(state_is("bot", "valid"))
        assert without_times((await status(service, "bot"))["evals"]) == valid(fixed, path)

        path.unlink()
        await service.registry.wait_for(waiting("bot", lambda e: e is None))
        final = await status(service, "bot")
        assert ("evals" not in final, final["revision"], final["last_error"]) == (
            True,
            revision_of(agent),
            None,
        )
        assert len(service.registry.history("bot")) == 1  # no suite edit rebuilt the agent


async def test_a_suite_never_claims_its_agent_name_nor_blocks_the_agent_that_comes_later(
    agents_dir: Path, state_dir: Path
) -> None:
    (agents_dir / "bot.evals.yaml").write_text(BROKEN, encoding="utf-8")
    (agents_dir / "lonely.evals.json").write_text("{}", encoding="utf-8")
    (agents_dir / "aaa.yaml").write_text(yaml.safe_dump(agent_document("other")), "utf-8")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        await service.wait_serving("other", revision_of(agent_document("other")))
        await service.registry.wait_for(lambda r: r.attachments.get("lonely", "evals") is not None)
        listed = await (await service.client.get("/v1/agents")).json()
        assert [a["name"] for a in listed["agents"]] == ["other"]  # no entry for a suite

        agent = agent_document("bot")
        service.write_agent(agent)
        await service.wait_serving("bot", revision_of(agent))
        shown = await status(service, "bot")
        assert (shown["last_error"], shown["evals"]["state"], shown["evals"]["revision"]) == (
            None,
            "refused",
            None,
        )
        assert await answers(service, "bot") == revision_of(agent)


async def test_a_suite_beside_a_file_agent_is_a_json_or_yml_document_too(
    agents_dir: Path, state_dir: Path
) -> None:
    import json

    for name, filename, text in (
        ("a", "a.evals.json", json.dumps(SUITE)),
        ("b", "b.evals.yml", suite_text(SUITE)),
    ):
        write_agent(agents_dir, agent_document(name))
        (agents_dir / filename).write_text(text, encoding="utf-8")
    async with running_service(service_config(agents_dir, state_dir)) as service:
        for name in ("a", "b"):
            await service.registry.wait_for(waiting(name, lambda e: e is not None))
            assert (await status(service, name))["evals"]["revision"] == load_suite(SUITE).revision
