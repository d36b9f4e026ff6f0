"""Version management over HTTP: the revision history, promote and rollback through the agent
files under a steady load of requests, and who may do it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from dynagent import cli, load_spec
from dynagent.registry.table import HISTORY
from tests.support.canary import Load, canary_document, canary_filename, canary_revision
from tests.support.process import DYNAGENT, free_port, wait_ready
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "user-key-0123456789abcdef"
FILE_ADMIN_KEY = "file-admin-key-0123456789"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
USER = {"Authorization": f"Bearer {USER_KEY}"}

V1 = agent_document("bot", system="Version one.")
V2 = agent_document("bot", system="Version two.")
CANDIDATE = agent_document("bot", system="Candidate.", model={"settings": {"temperature": 0.9}})
CANARY = canary_document(CANDIDATE, weight=30)


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    """``bot`` at V1, then V2, with a canary; admin keys from the environment and a keys file."""
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(
        yaml.safe_dump({"keys": [{"name": "ops", "key": FILE_ADMIN_KEY, "admin": True}]})
    )
    write_agent(agents_dir, V1)
    environ = {"DYNAGENT_API_KEYS": USER_KEY, "DYNAGENT_ADMIN_KEYS": ADMIN_KEY}
    config = service_config(
        agents_dir, state_dir, sessions={"store": "memory"}, auth={"keys_file": str(keys_file)}
    )
    async with running_service(config, environ=environ) as running:
        running.write_agent(V2)
        await running.wait_serving("bot", revision_of(V2))
        running.write_agent(CANARY, filename=canary_filename("bot"))
        await running.registry.wait_for(lambda r: r.entry("bot").canary is not None)
        yield running


def record(revision: str, variant: str, location: Path) -> dict[str, Any]:
    return {
        "revision": revision,
        "variant": variant,
        "factory": "default",
        "source": {"kind": "file", "location": str(location.resolve())},
    }


async def revisions(service: RunningService, headers: dict[str, str] = USER) -> dict[str, Any]:
    response = await service.client.get("/v1/agents/bot/revisions", headers=headers)
    body = await response.json()
    assert response.status == 200, body
    for entry in body["revisions"]:
        assert isinstance(entry.pop("loaded_at"), float)
    return dict(body)


async def post(
    service: RunningService, action: str, body: Any = None, headers: dict[str, str] = ADMIN
) -> tuple[int, Any]:
    response = await service.client.post(f"/v1/agents/bot/{action}", json=body, headers=headers)
    return response.status, await response.json()


async def test_the_history_is_newest_first_and_bounded(
    service: RunningService, agents_dir: Path
) -> None:
    stable_file, canary_file = agents_dir / "bot.yaml", agents_dir / canary_filename("bot")
    assert await revisions(service) == {
        "name": "bot",
        "current": {"stable": revision_of(V2), "canary": canary_revision(CANARY)},
        "revisions": [
            record(canary_revision(CANARY), "canary", canary_file),
            record(revision_of(V2), "stable", stable_file),
            record(revision_of(V1), "stable", stable_file),
        ],
    }
    edits = [agent_document("bot", system=f"Edit {i}.") for i in range(HISTORY)]
    for edit in edits:
        service.write_agent(edit)
        await service.wait_serving("bot", revision_of(edit))
    listed = await revisions(service)
    assert listed["revisions"] == [
        record(revision_of(e), "stable", stable_file) for e in reversed(edits)
    ]
    assert listed["current"] == {
        "stable": revision_of(edits[-1]),
        "canary": canary_revision(CANARY),
    }


async def test_promote_under_load_serves_the_canary_as_stable_without_a_failure(
    service: RunningService, agents_dir: Path
) -> None:
    url = f"{service.url}/v1/agents/bot/invoke"
    async with Load(service.client.session, url, headers=USER) as load:
        before = await load.until(50)
        status, body = await post(service, "promote")
        promoted = len(load.answers)
        await load.until(promoted + 50)
    during = promoted - before
    print(f"promote: {len(load.answers)} requests, {during} answered during the promote")
    assert (status, body["revision"], body["canary"], body["last_error"]) == (
        200,
        canary_revision(CANARY),
        None,
        None,
    )
    assert load.failures() == []
    assert during > 0
    assert load.revisions() == {revision_of(V2), canary_revision(CANARY)}
    # Requests sent once the promote had answered (all but the ones then in flight): on the
    # promoted revision, as the stable.
    late = load.answers[promoted + load.workers :]
    assert len(late) >= 46
    assert {(a.variant, a.revision) for a in late} == {("stable", canary_revision(CANARY))}

    assert sorted(p.name for p in agents_dir.iterdir()) == ["bot.yaml"]
    text = (agents_dir / "bot.yaml").read_text(encoding="utf-8")
    assert yaml.safe_load(text) == CANDIDATE
    assert load_spec(text).revision == canary_revision(CANARY)
    status, body = await post(service, "promote")
    assert (status, body) == (
        409,
        {"error": {"type": "conflict", "message": "agent 'bot' has no canary to promote"}},
    )


async def test_rollback_under_load_restores_the_previous_or_a_named_revision(
    service: RunningService, agents_dir: Path
) -> None:
    url = f"{service.url}/v1/agents/bot/invoke"
    async with Load(service.client.session, url, headers=USER) as load:
        before = await load.until(30)
        status, body = await post(service, "rollback")  # no body: the stable before V2
        during = len(load.answers) - before
        await load.until(len(load.answers) + 30)
        assert (status, body["revision"]) == (200, revision_of(V1))
        assert body["canary"]["revision"] == canary_revision(CANARY)  # untouched

        status, body = await post(service, "rollback", {"to": revision_of(V2)})
        assert (status, body["revision"]) == (200, revision_of(V2))
        status, body = await post(service, "rollback", {"to": canary_revision(CANARY)})
        assert (status, body["revision"]) == (200, canary_revision(CANARY))
        await load.until(len(load.answers) + 30)
    print(f"rollbacks: {len(load.answers)} requests, {during} answered during the first one")
    assert load.failures() == []
    assert during > 0
    assert load.revisions() == {revision_of(V1), revision_of(V2), canary_revision(CANARY)}
    assert yaml.safe_load((agents_dir / "bot.yaml").read_text(encoding="utf-8")) == CANDIDATE
    history = await revisions(service)
    assert [(r["revision"], r["variant"]) for r in history["revisions"]] == [
        (canary_revision(CANARY), "stable"),
        (revision_of(V2), "stable"),
        (revision_of(V1), "stable"),
        (canary_revision(CANARY), "canary"),
    ]


async def test_rollback_to_an_unknown_revision_is_not_found(service: RunningService) -> None:
    assert await post(service, "rollback", {"to": "0123456789ab"}) == (
        404,
        {
            "error": {
                "type": "not_found",
                "message": "revision '0123456789ab' is not in the history of agent 'bot'",
            }
        },
    )
    status, body = await post(service, "rollback", {"to": ""})
    assert (status, body["error"]["type"]) == (400, "bad_request")
    assert service.registry.get("bot").revision == revision_of(V2)


async def test_only_admin_keys_may_promote_or_roll_back(service: RunningService) -> None:
    forbidden = {
        "error": {
            "type": "forbidden",
            "message": "promote, rollback, pause, resume and approve need an admin API key",
        }
    }
    for action in ("promote", "rollback", "rollout/pause", "rollout/resume"):
        assert await post(service, action, headers=USER) == (403, forbidden)
        status, body = await post(service, action, headers={})
        assert (status, body["error"]["type"]) == (401, "unauthorized")
    assert service.registry.get("bot").revision == revision_of(V2)
    assert (await revisions(service, USER))["current"]["stable"] == revision_of(V2)

    file_admin = {"Authorization": f"Bearer {FILE_ADMIN_KEY}"}
    status, body = await post(service, "rollback", headers=file_admin)
    assert (status, body["revision"]) == (200, revision_of(V1))
    status, body = await post(service, "promote", headers=ADMIN)
    assert (status, body["revision"]) == (200, canary_revision(CANARY))


async def test_an_agent_without_history_cannot_roll_back(agents_dir: Path, state_dir: Path) -> None:
    write_agent(agents_dir, V1)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        assert await post(service, "rollback", headers={}) == (
            409,
            {
                "error": {
                    "type": "conflict",
                    "message": "agent 'bot' has no earlier revision to roll back to",
                }
            },
        )
        status, body = await post(service, "promote", headers={})
        assert (status, body["error"]["type"]) == (409, "conflict")
        response = await service.client.post("/v1/agents/nobody/promote")
        assert (response.status, (await response.json())["error"]["type"]) == (404, "not_found")


@pytest.fixture
def served(agents_dir: Path, tmp_path: Path) -> Iterator[str]:
    """``dynagent serve --agents`` in a real process: ``bot`` at V2 with its canary."""
    write_agent(agents_dir, V2)
    write_agent(agents_dir, CANARY, filename=canary_filename("bot"))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYNAGENT_"))}
    environ |= {
        "DYNAGENT_SESSIONS_PATH": str(tmp_path / "sessions.db"),
        "DYNAGENT_API_KEYS": USER_KEY,
        "DYNAGENT_ADMIN_KEYS": ADMIN_KEY,
    }
    port = free_port()
    # The log goes to a file: every request logs a line, and a full pipe would stall the server.
    with (tmp_path / "serve.log").open("w") as log:
        server = subprocess.Popen(
            [str(DYNAGENT), "serve", "--agents", str(agents_dir), "--port", str(port)],
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
        try:
            wait_ready(f"http://127.0.0.1:{port}", server)
            yield f"http://127.0.0.1:{port}"
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=30) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


async def command(*args: str, key: str) -> tuple[int, Any]:
    """Run ``dynagent *args`` without blocking the loop (the load keeps going meanwhile)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DYNAGENT_")}
    process = await asyncio.create_subprocess_exec(
        str(DYNAGENT),
        *args,
        env={**environ, "DYNAGENT_API_KEY": key},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    return process.returncode or 0, json.loads(out) if out else err.decode()


@pytest.mark.slow  # one `dynagent` process per command, each importing the package
async def test_the_promote_and_rollback_commands_against_a_running_service(
    served: str, agents_dir: Path
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        Load(session, f"{served}/v1/agents/bot/invoke", headers=USER, pause=0.01) as load,
    ):
        before = await load.until(30)
        code, status = await command("promote", "bot", "--json", "--url", served, key=ADMIN_KEY)
        during = len(load.answers) - before
        assert (code, status["revision"], status["canary"]) == (0, canary_revision(CANARY), None)
        assert sorted(p.name for p in agents_dir.iterdir()) == ["bot.yaml"]

        code, status = await command("rollback", "bot", "--json", "--url", served, key=ADMIN_KEY)
        assert (code, status["revision"]) == (0, revision_of(V2))
        to_canary = ("--to", canary_revision(CANARY), "--json")
        code, status = await command("rollback", "bot", *to_canary, "--url", served, key=ADMIN_KEY)
        assert (code, status["revision"]) == (0, canary_revision(CANARY))

        code, error = await command("promote", "bot", "--json", "--url", served, key=USER_KEY)
        assert (code, error["error"]["type"]) == (1, "forbidden")
        await load.until(len(load.answers) + 30)
    print(f"promote + 2 rollbacks by command: {len(load.answers)} requests, none failed")
    assert load.failures() == []
    assert during > 0
    assert load.revisions() == {revision_of(V2), canary_revision(CANARY)}
    assert yaml.safe_load((agents_dir / "bot.yaml").read_text(encoding="utf-8")) == CANDIDATE


@pytest.mark.slow  # one `dynagent` process per command
async def test_the_rollout_pause_and_resume_commands_against_a_running_service(
    served: str, agents_dir: Path
) -> None:
    canary_file = agents_dir / canary_filename("bot")
    code, status = await command(
        "rollout", "pause", "bot", "--reason", "too slow", "--url", served, key=ADMIN_KEY
    )
    assert (code, status["canary"]["state"], status["canary"]["pulled"]["reason"]) == (
        0,
        "pulled",
        "too slow",
    )
    paused = yaml.safe_load(canary_file.read_text(encoding="utf-8"))["rollout"]["paused"]
    assert (paused["reason"], paused["by"]) == ("too slow", "DYNAGENT_ADMIN_KEYS[0]")

    code, error = await command("rollout", "pause", "bot", "--url", served, key=ADMIN_KEY)
    assert (code, error["error"]["type"]) == (1, "conflict")
    code, error = await command("rollout", "resume", "bot", "--url", served, key=USER_KEY)
    assert (code, error["error"]["type"]) == (1, "forbidden")
    code, message = await command(
        "rollout", "resume", "bot", "--reason", "x", "--url", served, key=ADMIN_KEY
    )
    assert (code, message) == (2, "error: --reason goes with pause only\n")

    code, status = await command("rollout", "resume", "bot", "--url", served, key=ADMIN_KEY)
    assert (code, status["canary"]["state"]) == (0, "serving")
    document = yaml.safe_load(canary_file.read_text(encoding="utf-8"))
    trail = document["rollout"].pop("history")  # the two decisions, kept in the canary
    assert [entry["action"] for entry in trail] == ["pause", "resume"]
    assert document == CANARY


async def test_promote_and_rollback_commands_print_one_line_and_the_status_with_json(
    service: RunningService, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a release owner reads after ``dynagent promote``: the outcome in one line (the
    agent's whole status, 80 lines of JSON, only with ``--json``); a refusal on stderr."""

    async def dynagent(*argv: str, key: str = ADMIN_KEY) -> tuple[int, str, str]:
        args = [*argv, "--url", service.url, "--api-key", key]
        code = await asyncio.to_thread(cli.main, args)  # the command blocks: not on this loop
        out, err = capsys.readouterr()
        return code, out, err

    promoted, stable = canary_revision(CANARY), revision_of(V2)
    assert await dynagent("promote", "bot") == (
        0,
        f"bot: promoted; stable is revision {promoted}, no canary\n",
        "",
    )
    assert await dynagent("promote", "bot") == (
        1,
        "",
        "error: agent 'bot' has no canary to promote (conflict)\n",
    )
    assert await dynagent("rollback", "bot", key=USER_KEY) == (
        1,
        "",
        "error: promote, rollback, pause, resume and approve need an admin API key (forbidden)\n",
    )
    code, out, err = await dynagent("rollback", "bot", "--json")
    assert (code, err) == (0, "")
    status = await service.client.get("/v1/agents/bot", headers=ADMIN)
    assert json.loads(out) == await status.json()
    assert json.loads(out)["revision"] == stable
    assert await dynagent("rollback", "bot", "--to", promoted) == (
        0,
        f"bot: rolled back; stable is revision {promoted}, no canary\n",
        "",
    )
