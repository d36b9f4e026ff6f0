"""Promote and rollback of agent files that are symbolic links (a ConfigMap mount, a
``current -> v2.yaml`` layout): refused with 409 and a message, the files untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.canary import canary_document, canary_filename
from tests.support.service import agent_document, revision_of, running_service, service_config

V1 = agent_document("bot", system="Version one.")
V2 = agent_document("bot", system="Version two.")
CANARY = canary_document(agent_document("bot", system="Candidate."), weight=30)


def link_message(action: str, filename: str) -> str:
    return (
        f"cannot {action}: agent file {filename} is a symbolic link; the service writes agent "
        "files in place and never replaces a link: edit the file it points to, or replace "
        "the link with a regular file"
    )


def linked(agents_dir: Path, target: Path, filename: str, document: dict[str, Any]) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    (agents_dir / filename).symlink_to(target)
    return target


@pytest.mark.parametrize("where", ["outside", "inside"])
async def test_promote_and_rollback_of_a_linked_file_are_409_and_change_nothing(
    agents_dir: Path, state_dir: Path, tmp_path: Path, where: str
) -> None:
    base = tmp_path / "versions" if where == "outside" else agents_dir / "versions"
    stable = linked(agents_dir, base / "bot-v1.yaml", "bot.yaml", V1)
    canary = linked(agents_dir, base / "bot-canary.yaml", canary_filename("bot"), CANARY)
    async with running_service(service_config(agents_dir, state_dir)) as service:
        await service.wait_serving("bot", revision_of(V1))
        # Swap the link to a second version, as a ConfigMap update does: a history.
        stable = base / "bot-v2.yaml"
        stable.write_text(yaml.safe_dump(V2, sort_keys=False), encoding="utf-8")
        (agents_dir / ".bot.yaml.link").symlink_to(stable)
        (agents_dir / ".bot.yaml.link").replace(agents_dir / "bot.yaml")
        await service.wait_serving("bot", revision_of(V2))
        await service.registry.wait_for(lambda r: r.entry("bot").canary is not None)
        before = {path: path.read_text() for path in (stable, canary)}

        answers = []
        for action in ("promote", "rollback"):
            async with service.client.post(f"/v1/agents/bot/{action}") as response:
                answers.append((response.status, await response.json()))

        assert answers == [
            (409, {"error": {"type": "conflict", "message": link_message("promote", "bot.yaml")}}),
            (409, {"error": {"type": "conflict", "message": link_message("rollback", "bot.yaml")}}),
        ]
        assert {path: path.read_text() for path in (stable, canary)} == before
        assert (agents_dir / "bot.yaml").is_symlink()
        assert (agents_dir / canary_filename("bot")).is_symlink()
        assert service.serving("bot") == revision_of(V2)
