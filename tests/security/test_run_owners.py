"""A run's records belong to the identity that made it: its trace, summary, nested runs,
rating and stored response are shown to that key and to admins, never to another key
allowed the same agent. The walk goes through every route of the app's router, so a new
route that shows run data is caught without anyone remembering to add it here."""

from __future__ import annotations

import asyncio
import re
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from dynagent.http.state import SERVICE
from tests.support.canary import canary_document, canary_filename
from tests.support.service import RunningService, agent_document, running_service, service_config

KEYS = {
    "alice": "alice-key-aaaaaaaaaaaaaaaaaaaa",
    "bob": "bob-key-bbbbbbbbbbbbbbbbbbbbbbbb",
    "ops": "ops-key-cccccccccccccccccccccccc",
    "boss-ops": "boss-ops-key-dddddddddddddddddd",
    "labeller": "labeller-key-eeeeeeeeeeeeeeeeee",
}
"""alice and bob may call both agents; ops is an admin; boss-ops an admin limited to
``boss``; labeller may call both agents and rate any of their runs."""
MARK = f"alice-private-{secrets.token_hex(8)}"
"""In every input of alice's runs (and so in the test model's answers)."""

RUN_DATA_ROUTES = {
    ("GET", "/v1/traces"),
    ("GET", "/v1/traces/{trace_id}"),
    ("GET", "/v1/responses/{response_id}"),
    ("GET", "/v1/responses/{response_id}/input_items"),
}
"""The routes that show a run's content to the key that made it. A new route that does
shows up here, by the walk, and must keep the rule the others keep."""
OWNER_ONLY_ROUTES = {("GET", "/v1/agents/{name}/sessions/{session_id}")}
"""A conversation is reached under the key that had it only: not even an admin reads
another key's session (the same id is the admin's own session)."""
SESSION = "alice-session"
DELETES = {
    ("DELETE", "/v1/traces/{trace_id}"),
    ("DELETE", "/v1/responses/{response_id}"),
    ("DELETE", "/v1/agents/{name}/sessions/{session_id}"),
}
"""Routes that delete a run's record: walked only by keys that must be refused (the
record must survive the walk), then tried by its owner at the end."""


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[who]}"}


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    keys = tmp_path / "keys.yaml"
    both = ["bot", "boss"]
    entries = [
        {"name": "alice", "key": KEYS["alice"], "agents": both},
        {"name": "bob", "key": KEYS["bob"], "agents": both},
        {"name": "ops", "key": KEYS["ops"], "admin": True},
        {"name": "boss-ops", "key": KEYS["boss-ops"], "admin": True, "agents": ["boss"]},
        {"name": "labeller", "key": KEYS["labeller"], "agents": both, "feedback": True},
    ]
    keys.write_text(yaml.safe_dump({"keys": entries}), encoding="utf-8")
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    async with running_service(config, environ={}) as running:
        running.write_agent(agent_document("bot"))
        running.write_agent(agent_document("boss", tools=[{"type": "agent", "name": "bot"}]))
        await running.registry.wait_for(lambda r: "bot" in r and "boss" in r)
        yield running


@dataclass(frozen=True)
class AliceRuns:
    invoked: str
    """The trace of an invoke of ``bot``."""
    responded: str
    """The trace of a stored Response."""
    response_id: str
    nested: str
    """The trace of ``boss``, which called ``bot``."""
    revision: str
    """``bot``'s revision."""


async def post(service: RunningService, who: str, path: str, body: Any) -> tuple[int, Any]:
    async with service.client.post(path, json=body, headers=bearer(who)) as response:
        return response.status, await response.json()


async def alice_runs(service: RunningService) -> AliceRuns:
    first = {"input": MARK, "session_id": SESSION}
    status, invoked = await post(service, "alice", "/v1/agents/bot/invoke", first)
    assert status == 200, invoked
    status, response = await post(
        service, "alice", "/v1/responses", {"model": "bot", "input": f"{MARK} (a response)"}
    )
    assert status == 200, response
    status, nested = await post(service, "alice", "/v1/agents/boss/invoke", {"input": MARK})
    assert status == 200, nested
    traces = await get_json(service, "alice", "/v1/traces")
    responded = next(t["trace_id"] for t in traces["traces"] if "(a response)" in t["input"])
    return AliceRuns(
        invoked["trace_id"], responded, response["id"], nested["trace_id"], invoked["revision"]
    )


async def get_json(service: RunningService, who: str, path: str) -> Any:
    async with service.client.get(path, headers=bearer(who)) as response:
        assert response.status == 200, await response.text()
        return await response.json()


def _a2a_send(text: str) -> dict[str, Any]:
    message = {
        "kind": "message",
        "role": "user",
        "messageId": uuid.uuid4().hex,
        "parts": [{"kind": "text", "text": text}],
    }
    return {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}


BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/v1/agents/{name}/invoke"): {"input": "a walk"},
    ("POST", "/v1/agents/{name}/promote"): None,
    ("POST", "/v1/agents/{name}/rollback"): None,
    ("POST", "/v1/agents/{name}/rollout/pause"): None,
    ("POST", "/v1/agents/{name}/rollout/resume"): None,
    ("POST", "/v1/agents/{name}/rollout/approve"): None,
    ("POST", "/v1/agents/{name}/evals"): {},
    ("POST", "/v1/traces/{trace_id}/feedback"): {"score": 1},
    ("POST", "/v1/chat/completions"): {
        "model": "bot",
        "messages": [{"role": "user", "content": "a walk"}],
    },
    ("POST", "/v1/responses"): {"model": "bot", "input": "a walk"},
    ("POST", "/a2a/{name}"): _a2a_send("a walk"),
}
"""What the walk sends to each route that takes a body."""
ADMIN_RUN_DATA_ROUTES = {("GET", "/v1/agents/{name}/capture")}
"""Routes only an admin may call that show every caller's runs: a backtest suite is made
of them (``dynagent eval capture``)."""
QUERIES = {"/v1/watch/agents": "?max_seconds=1", "/v1/agents/{name}/capture": "?last=10"}
"""Streams that would otherwise stay open."""


def _routes(app: web.Application) -> list[tuple[str, str]]:
    """Every (method, path template) the app serves, from its router."""
    found = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("path") or info.get("formatter")
        if route.method not in ("HEAD", "OPTIONS") and path:
            found.add((route.method, path))
    return sorted(found)


def _fill(path: str, runs: AliceRuns) -> str:
    values = {
        "name": "bot",
        "model_id": "bot",
        "trace_id": runs.invoked,
        "response_id": runs.response_id,
        "revision": runs.revision,
        "file": "app.js",
        "run_id": "0123456789abcdef",
        "session_id": SESSION,
    }

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in values, f"the walk does not know how to fill {{{name}}} in {path}"
        return values[name]

    return re.sub(r"\{(\w+)\}", value, path)


async def _walk(
    service: RunningService, who: str, runs: AliceRuns, *, deletes: bool = False
) -> dict[tuple[str, str], tuple[int, str]]:
    """Each route's status and body text for ``who`` (the deleting ones: with
    ``deletes``)."""
    answers = {}
    for method, path in _routes(service.app):
        if (method, path) in DELETES and not deletes:
            continue
        url = _fill(path, runs) + QUERIES.get(path, "")
        if method == "POST":
            assert (method, path) in BODIES, f"say in BODIES what the walk sends to {path}"
            body = BODIES[(method, path)]
        else:
            body = None
        async with asyncio.timeout(60):
            async with service.client.request(
                method, url, json=body, headers=bearer(who), allow_redirects=False
            ) as response:
                answers[(method, path)] = (response.status, await response.text())
    return answers


def _shows_alice(answers: dict[tuple[str, str], tuple[int, str]], runs: AliceRuns) -> set[Any]:
    """The routes whose answer shows any of alice's runs: her text, or the id of a run
    the route was not asked about (an id named in the path may come back in an error)."""
    ids = (runs.invoked, runs.responded, runs.nested, runs.response_id)
    shown = set()
    for (method, path), (_, text) in answers.items():
        asked = _fill(path, runs)
        if MARK in text or any(i in text and i not in asked for i in ids):
            shown.add((method, path))
    return shown


async def test_every_route_shows_a_run_only_to_the_key_that_made_it_and_to_admins(
    service: RunningService,
) -> None:
    runs = await alice_runs(service)
    bob = await _walk(service, "bob", runs, deletes=True)
    assert _shows_alice(bob, runs) == set()
    assert bob[("GET", "/v1/traces/{trace_id}")][0] == 404
    assert bob[("GET", "/v1/responses/{response_id}")][0] == 404
    assert bob[("DELETE", "/v1/responses/{response_id}")][0] == 404
    assert bob[("DELETE", "/v1/traces/{trace_id}")][0] == 404
    assert bob[("DELETE", "/v1/agents/{name}/sessions/{session_id}")][0] == 404
    assert bob[("POST", "/v1/traces/{trace_id}/feedback")][0] == 404
    admin = await _walk(service, "ops", runs)
    assert _shows_alice(admin, runs) == RUN_DATA_ROUTES | ADMIN_RUN_DATA_ROUTES
    assert admin[("POST", "/v1/traces/{trace_id}/feedback")][0] == 403  # reads, never rates
    alice = await _walk(service, "alice", runs)
    assert _shows_alice(alice, runs) == RUN_DATA_ROUTES | OWNER_ONLY_ROUTES
    assert alice[("POST", "/v1/traces/{trace_id}/feedback")][0] == 200
    rated = await get_json(service, "alice", f"/v1/traces/{runs.invoked}")
    assert rated["feedback"] == {"score": 1.0, "comment": None}
    deleted = await _walk(service, "alice", runs, deletes=True)  # bob's delete took nothing
    assert deleted[("DELETE", "/v1/responses/{response_id}")][0] == 200
    assert deleted[("DELETE", "/v1/agents/{name}/sessions/{session_id}")][0] == 200
    assert deleted[("DELETE", "/v1/traces/{trace_id}")][0] == 200
    gone = await service.client.get(f"/v1/traces/{runs.invoked}", headers=bearer("alice"))
    assert gone.status == 404


async def test_every_run_route_records_its_caller_as_the_owner(service: RunningService) -> None:
    streamed = {"input": MARK, "stream": True}
    sent = [
        ("/v1/agents/bot/invoke", {"input": MARK}),
        ("/v1/agents/bot/invoke", streamed),
        ("/v1/chat/completions", {"model": "bot", "messages": [{"role": "user", "content": MARK}]}),
        (
            "/v1/chat/completions",
            {"model": "bot", "messages": [{"role": "user", "content": MARK}], "stream": True},
        ),
        ("/v1/responses", {"model": "bot", "input": MARK}),
        ("/v1/responses", {"model": "bot", "input": MARK, "stream": True}),
        ("/a2a/bot", _a2a_send(MARK)),
    ]
    for path, body in sent:
        async with service.client.post(path, json=body, headers=bearer("alice")) as response:
            assert response.status == 200, await response.text()
            await response.read()
    mine = (await get_json(service, "alice", "/v1/traces"))["traces"]
    assert [(t["agent"], t["owner"], MARK in t["input"]) for t in mine] == [
        ("bot", "key:alice", True)
    ] * len(sent)
    assert (await get_json(service, "bob", "/v1/traces"))["traces"] == []
    everyone = (await get_json(service, "ops", "/v1/traces"))["traces"]
    assert [t["trace_id"] for t in everyone] == [t["trace_id"] for t in mine]


async def test_nested_runs_show_only_the_agents_the_reader_may_call(
    service: RunningService,
) -> None:
    runs = await alice_runs(service)
    whole = await get_json(service, "alice", f"/v1/traces/{runs.nested}")
    assert [(n["agent"], n["caller"]) for n in whole["nested"]] == [("bot", "boss")]
    assert whole["owner"] == "key:alice"
    narrow = await get_json(service, "boss-ops", f"/v1/traces/{runs.nested}")
    assert {**narrow, "nested": whole["nested"]} == whole and "nested" not in narrow
    listed = (await get_json(service, "boss-ops", "/v1/traces"))["traces"]
    assert [t["trace_id"] for t in listed] == [runs.nested]  # bot's runs are not its to see


async def test_a_response_id_says_nothing_of_its_trace_id(service: RunningService) -> None:
    runs = await alice_runs(service)
    assert runs.response_id.startswith("resp_")
    assert runs.responded not in runs.response_id
    assert runs.responded[:8] not in runs.response_id


async def test_a_run_is_rated_by_its_maker_or_a_key_with_the_feedback_right(
    service: RunningService,
) -> None:
    runs = await alice_runs(service)
    path = f"/v1/traces/{runs.responded}/feedback"
    status, refused = await post(service, "bob", path, {"thumbs": "up"})
    assert (status, refused["error"]["type"]) == (404, "not_found")
    status, refused = await post(service, "ops", path, {"thumbs": "up"})
    assert (status, refused["error"]["type"]) == (403, "forbidden")
    status, rated = await post(service, "labeller", path, {"thumbs": "down"})
    assert (status, rated["score"], rated["agent"]) == (200, 0.0, "bot")
    status, again = await post(service, "alice", path, {"thumbs": "up"})
    assert (status, again["error"]["type"]) == (409, "conflict")
    assert service.registry.status("bot")["traffic"]["stable"]["ratings"] == 1


async def test_a_shadow_copy_of_a_run_belongs_to_the_same_caller(
    service: RunningService,
) -> None:
    candidate = agent_document("bot", system="The canary.")
    service.write_agent(
        canary_document(candidate, weight=0, shadow=100), filename=canary_filename("bot")
    )
    await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
    status, _ = await post(service, "alice", "/v1/agents/bot/invoke", {"input": MARK})
    assert status == 200
    await service.app[SERVICE].shadows.idle()
    mine = (await get_json(service, "alice", "/v1/traces"))["traces"]
    assert sorted((t["variant"], t["owner"], t["input"]) for t in mine) == [
        ("canary", "key:alice", MARK),
        ("stable", "key:alice", MARK),
    ]
    assert (await get_json(service, "bob", "/v1/traces"))["traces"] == []
