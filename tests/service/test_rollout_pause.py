"""Pausing a canary by hand: ``POST /v1/agents/{name}/rollout/pause`` writes
``rollout.paused`` into the canary's file, as the guard's pulls are written, so the stable
answers everyone, a restart keeps the pause, and a resume puts the canary back. Who may
pause, and the clear errors of everything else."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from dynagent.http.api.schemas import PauseRequest
from dynagent.rollout._yaml_lines import edited_lines
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

ADMIN_KEY = "pause-admin-key-0123456789"
USER_KEY = "pause-user-key-0123456789"
OTHER_KEY = "pause-other-key-0123456789"
"""An admin key (``ops``), a plain key from the environment, and a key limited to ``solo``."""
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}

STABLE = agent_document("bot", system="Stable.")
CANDIDATE = agent_document("bot", system="Candidate.")
CANARY = canary_document(CANDIDATE, weight=100)
"""At 100 %, every caller that is not pinned gets the canary while it serves."""
SOLO = agent_document("solo")


@asynccontextmanager
async def keyed_service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    """The service on ``agents_dir`` with the three keys; the test writes the files first."""
    keys = [
        {"name": "ops", "key": ADMIN_KEY, "admin": True},
        {"name": "solo-only", "key": OTHER_KEY, "agents": ["solo"]},
    ]
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"keys": keys}))
    config = service_config(
        agents_dir, state_dir, sessions={"store": "memory"}, auth={"keys_file": str(keys_file)}
    )
    async with running_service(config, environ={"DYNAGENT_API_KEYS": USER_KEY}) as service:
        await service.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        yield service


async def post(
    service: RunningService, action: str, body: Any = None, headers: dict[str, str] = ADMIN
) -> tuple[int, Any]:
    response = await service.client.post(
        f"/v1/agents/bot/rollout/{action}", json=body, headers=headers
    )
    return response.status, await response.json()


async def variant(service: RunningService, headers: dict[str, str] = ADMIN) -> tuple[str, str]:
    """The variant and revision that answer an unpinned caller."""
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={**headers, "X-Canary-Key": "c"}
    )
    body = await response.json()
    assert response.status == 200, body
    return body["variant"], body["revision"]


def stored_rollout(path: Path) -> dict[str, Any]:
    rollout: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))["rollout"]
    return rollout


async def test_a_pause_is_written_into_the_canary_file_and_outlives_a_restart(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    write_agent(agents_dir, STABLE)
    path = write_agent(agents_dir, CANARY, filename=canary_filename("bot"))
    canary = canary_revision(CANARY)
    async with keyed_service(agents_dir, state_dir, tmp_path) as service:
        assert await variant(service) == ("canary", canary)
        now = datetime.now().astimezone()
        before = now.replace(microsecond=now.microsecond // 1000 * 1000)  # stored to the ms

        status, body = await post(service, "pause", {"reason": "  checkout errors  "})

        assert status == 200, body
        pulled = body["canary"]["pulled"]
        assert isinstance(pulled.pop("at"), float)
        assert (body["canary"]["state"], pulled) == (
            "pulled",
            {"reason": "checkout errors", "by": "ops", "recorded": True},
        )
        paused = stored_rollout(path)["paused"]
        assert before <= datetime.fromisoformat(paused.pop("at")) <= datetime.now().astimezone()
        (decision,) = stored_rollout(path)["history"]
        assert (decision["action"], decision["by"]) == ("pause", "ops")
        assert stored_rollout(path) | {"paused": paused, "history": []} == {
            "weight": 100,
            "paused": {"reason": "checkout errors", "by": "ops", "revision": canary},
            "history": [],
        }
        assert await variant(service) == ("stable", revision_of(STABLE))
        assert await post(service, "pause") == (
            409,
            {
                "error": {
                    "type": "conflict",
                    "message": "the canary of agent 'bot' is already paused",
                }
            },
        )

    async with keyed_service(agents_dir, state_dir, tmp_path) as restarted:
        assert restarted.registry.status("bot")["canary"]["state"] == "pulled"
        assert await variant(restarted) == ("stable", revision_of(STABLE))
        status, body = await post(restarted, "resume")
        assert (status, body["canary"]["state"], body["canary"]["pulled"]) == (200, "serving", None)
        stored = stored_rollout(path)
        assert [entry["action"] for entry in stored.pop("history")] == ["pause", "resume"]
        assert stored == {"weight": 100}
        assert await variant(restarted) == ("canary", canary)


async def test_with_auth_off_the_pause_is_the_operators_and_a_json_file_stays_json(
    agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, STABLE)
    path = agents_dir / "bot.canary.json"
    path.write_text(json.dumps(CANARY), encoding="utf-8")
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        await service.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        response = await service.client.post("/v1/agents/bot/rollout/pause")  # no body at all
        body = await response.json()
        assert response.status == 200, body
        assert (body["canary"]["pulled"]["by"], body["canary"]["pulled"]["reason"]) == (
            "operator",
            "paused by hand",
        )
        stored = json.loads(path.read_text(encoding="utf-8"))["rollout"]
        assert (stored["paused"]["by"], stored["paused"]["reason"]) == (
            "operator",
            "paused by hand",
        )
        assert await variant(service, {}) == ("stable", revision_of(STABLE))


async def test_who_may_pause_and_the_errors_of_everything_else(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    write_agent(agents_dir, STABLE)
    path = write_agent(agents_dir, CANARY, filename=canary_filename("bot"))
    write_agent(agents_dir, SOLO)
    text = path.read_text(encoding="utf-8")
    async with keyed_service(agents_dir, state_dir, tmp_path) as service:
        await service.wait_serving("solo", revision_of(SOLO))
        forbidden = "promote, rollback, pause, resume and approve need an admin API key"
        cases: list[tuple[str, Any, dict[str, str], int, str]] = [
            ("bot", None, {"Authorization": f"Bearer {USER_KEY}"}, 403, forbidden),
            ("bot", None, {"Authorization": f"Bearer {OTHER_KEY}"}, 403, "may not call agent"),
            ("bot", None, {}, 401, ""),
            ("nobody", None, ADMIN, 404, "nobody"),
            ("solo", None, ADMIN, 409, "agent 'solo' has no canary to pause"),
            ("bot", {"reason": ""}, ADMIN, 400, "reason"),
            ("bot", {"reason": "   "}, ADMIN, 400, "reason"),
            ("bot", {"reason": "x" * 4001}, ADMIN, 400, "reason"),
            ("bot", {"why": "x"}, ADMIN, 400, "why"),
            ("bot", [1], ADMIN, 400, "must be a JSON object"),
        ]
        answers = []
        for name, body, headers, *_ in cases:
            response = await service.client.post(
                f"/v1/agents/{name}/rollout/pause", json=body, headers=headers
            )
            error = (await response.json())["error"]
            answers.append((response.status, error["message"]))
        assert [status for status, _ in answers] == [case[3] for case in cases]
        for (_, message), case in zip(answers, cases, strict=True):
            assert case[4] in message, (case, message)
        not_json = await service.client.post(
            "/v1/agents/bot/rollout/pause",
            data=b"{not json",
            headers={**ADMIN, "Content-Type": "application/json"},
        )
        assert (not_json.status, (await not_json.json())["error"]["type"]) == (400, "bad_request")
        assert path.read_text(encoding="utf-8") == text
        assert service.registry.status("bot")["canary"]["state"] == "serving"


async def test_the_pause_of_a_linked_canary_file_is_409_and_changes_nothing(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> None:
    write_agent(agents_dir, STABLE)
    target = tmp_path / "versions" / "bot-canary.yaml"
    target.parent.mkdir()
    target.write_text(yaml.safe_dump(CANARY, sort_keys=False), encoding="utf-8")
    (agents_dir / canary_filename("bot")).symlink_to(target)
    text = target.read_text(encoding="utf-8")
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        await service.registry.wait_for(lambda r: "bot" in r and r.entry("bot").canary is not None)
        response = await service.client.post("/v1/agents/bot/rollout/pause")
        assert (response.status, await response.json()) == (
            409,
            {
                "error": {
                    "type": "conflict",
                    "message": "cannot pause: agent file bot.canary.yaml is a symbolic link; "
                    "the service writes agent files in place and never replaces a link: edit "
                    "the file it points to, or replace the link with a regular file",
                }
            },
        )
        assert target.read_text(encoding="utf-8") == text
        assert (agents_dir / canary_filename("bot")).is_symlink()
        assert await variant(service, {}) == ("canary", canary_revision(CANARY))


COMMENTED_CANARIES = {
    "the sample's block, a comment on the weight": (
        "# A candidate; delete this file to end the canary.\n"
        "name: bot\n"
        "prompt: {system: Candidate.}  # warmer\n"
        "model: {provider: test, name: gpt-main}\n"
        "rollout:\n"
        "  # guard thresholds stay at their defaults\n"
        "  weight: 100                # percent of traffic\n"
        "\n"
        "# notes after the block\n"
    ),
    "a flow-style block, as the README writes it": (
        "name: bot  # the canary\n"
        "prompt: {system: Candidate.}\n"
        "model: {provider: test, name: gpt-main}\n"
        "rollout: {weight: 100}\n"
    ),
    "the block first, nested entries, no final newline": (
        "rollout:\n"
        "    weight: 100\n"
        "    guard:\n"
        "      # a comment inside a nested mapping\n"
        "      min_requests: 20\n"
        "name: bot\n"
        "prompt: {system: Candidate.}\n"
        "model: {provider: test, name: gpt-main}"
    ),
}


@pytest.mark.parametrize("layout", list(COMMENTED_CANARIES))
async def test_a_pause_and_resume_by_hand_keep_every_comment_of_a_canary_file(
    agents_dir: Path, state_dir: Path, tmp_path: Path, layout: str
) -> None:
    """The decision is the only change to a canary file a person wrote: the pause adds the
    ``paused`` entry, the resume takes it out, and every other line stays as written."""
    text = COMMENTED_CANARIES[layout]
    write_agent(agents_dir, STABLE)
    path = agents_dir / canary_filename("bot")
    path.write_text(text, encoding="utf-8")
    async with keyed_service(agents_dir, state_dir, tmp_path) as service:
        status, body = await post(service, "pause", {"reason": "checkout errors"})
        assert status == 200, body
        paused = path.read_text(encoding="utf-8")
        kept = [line for line in text.splitlines() if line.strip() and "rollout" not in line]
        assert [line for line in kept if line not in paused.splitlines()] == []
        assert stored_rollout(path)["paused"]["reason"] == "checkout errors"
        assert await variant(service) == ("stable", revision_of(STABLE))

        status, body = await post(service, "resume")
        assert (status, body["canary"]["state"]) == (200, "serving")
        resumed = path.read_text(encoding="utf-8")
        # The trail of the two decisions stays: every other line is as written.
        trail = stored_rollout(path)["history"]
        assert [(e["action"], e["by"]) for e in trail] == [("pause", "ops"), ("resume", "ops")]
        document = yaml.safe_load(resumed)
        document["rollout"].pop("history")
        assert document == yaml.safe_load(text)
        if "{weight" not in text:
            other = [line for line in resumed.splitlines() if "history:" not in line]
            assert other == text.splitlines()


PAUSED = {"reason": "r", "at": "2026-01-01T00:00:00+00:00", "by": "ops"}
EDGE_LAYOUTS = [
    "# rollout: an old note at the top\nname: bot\nrollout:\n  weight: 5\n",
    "name: bot\nrollout_notes: keep\nrollout:\n  weight: 5\nafter: 1\n",
    "---\nname: bot\nrollout:\r\n  weight: 5\r\n  paused: {reason: old}\r\n",
    "name: bot\nrollout:\n  weight: 5\n  paused:\n    reason: old\n    by: guard\n  sticky: s\n",
    "name: bot\nrollout: {weight: 5}  # half # of it\n",
    "name: bot\nrollout:\n\n  # a blank line and a comment first\n  weight: 5\n",
]


@pytest.mark.parametrize("text", EDGE_LAYOUTS)
def test_a_rollout_edit_keeps_the_other_lines_or_reads_back_as_intended(text: str) -> None:
    """The line edit either reads back as the edited document, with every line outside the
    rollout entries it changed untouched, or is not used (the document is dumped whole)."""
    data = yaml.safe_load(text)
    before = dict(data["rollout"])
    after = {**{k: v for k, v in before.items() if k != "paused"}, "paused": PAUSED}
    edited = edited_lines(text, "rollout", before, after)
    if edited is None:
        return
    try:
        reads_back = yaml.safe_load(edited) == {**data, "rollout": after}
    except yaml.YAMLError:
        reads_back = False
    if reads_back:
        untouched = [
            line
            for line in text.splitlines()
            if line.strip() and "paused" not in line and not line.startswith((" ", "\t", "rollout"))
        ]
        assert [line for line in untouched if line not in edited.splitlines()] == []
        comments = [line.strip() for line in text.splitlines() if "#" in line]
        assert [c for c in comments if c not in edited and "rollout: {" not in c] == []


@pytest.mark.parametrize(
    "reason",
    [" ", " \f", "\x1f", "\x1c\x1d", "\u3000", "\u2028 ", "\x85", " \x1f a ", "\u200b", "a"],
)
def test_the_document_and_the_validation_agree_on_which_reasons_are_empty(reason: str) -> None:
    """A reason the OpenAPI document allows is accepted, and one it refuses is refused:
    a fuzzer sending ``" \\f"`` (two characters, whitespace only) got a 400 for a body the
    document called valid."""
    documented = jsonschema.Draft202012Validator(PauseRequest.model_json_schema()).is_valid(
        {"reason": reason}
    )
    try:
        PauseRequest.model_validate({"reason": reason})
    except ValidationError:
        accepted = False
    else:
        accepted = True
    assert documented == accepted
