"""Who owns an agent's name in a folder: the file named after the agent, whatever the
order files load in, live and after a restart; a file named otherwise serves the name
only while no such file defines it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

REAL = agent_document("faq-bot", system="The real faq-bot.")
IMPOSTOR = agent_document("faq-bot", system="An impostor.")


async def owned_by_the_named_file(service: RunningService, agents_dir: Path) -> None:
    await service.wait_serving("faq-bot", revision_of(REAL))
    status = await service.wait_error("aaa", "already defines")
    where = agents_dir.resolve() / "aaa.yaml"
    assert (status["state"], status["revision"], status["last_error"]["message"]) == (
        "refused",
        None,
        f"agent 'aaa' {where}: this document names agent 'faq-bot', which faq-bot.yaml "
        "already defines; rename it (e.g. name: aaa) or delete it",
    )
    assert service.registry.entry("faq-bot").last_error is None


async def test_the_file_named_after_an_agent_owns_its_name_whatever_the_load_order(
    agents_dir: Path, state_dir: Path
) -> None:
    config = service_config(agents_dir, state_dir)
    write_agent(agents_dir, IMPOSTOR, filename="aaa.yaml")  # loads first: sorted by name
    async with running_service(config) as service:
        await service.wait_serving("faq-bot", revision_of(IMPOSTOR))
        service.write_agent(REAL, filename="faq-bot.yaml")
        await owned_by_the_named_file(service, agents_dir)

    async with running_service(config) as service:  # a restart: the same owner
        await owned_by_the_named_file(service, agents_dir)
        # The impostor, loaded first, never served the name, not even for a moment.
        assert [r.revision for r in service.registry.history("faq-bot")] == [revision_of(REAL)]
        (agents_dir / "faq-bot.yaml").unlink()
        # The name is free: the other file serves it, as a restart would have it.
        await service.wait_serving("faq-bot", revision_of(IMPOSTOR))
        await service.registry.wait_for(lambda r: "aaa" not in r)


async def test_of_two_files_named_after_an_agent_the_first_by_name_owns_it(
    agents_dir: Path, state_dir: Path
) -> None:
    """``faq-bot.json`` and ``faq-bot.yaml`` both name ``faq-bot``: the same one wins
    whichever came first, and the refusal never says to rename it to the name it has."""
    config = service_config(agents_dir, state_dir)
    write_agent(agents_dir, IMPOSTOR, filename="faq-bot.yaml")
    async with running_service(config) as service:
        await service.wait_serving("faq-bot", revision_of(IMPOSTOR))
        service.write_agent(json.dumps(REAL), filename="faq-bot.json")
        await service.wait_serving("faq-bot", revision_of(REAL))
        await service.wait_error("faq-bot", "delete one of them")
        error = service.registry.entry("faq-bot").last_error
        assert error is not None
        assert error.message == (
            f"agent 'faq-bot' {agents_dir.resolve() / 'faq-bot.yaml'}: this document names "
            "agent 'faq-bot', which faq-bot.json also defines and owns (the first by name of "
            "two documents named after an agent); delete one of them"
        )
    async with running_service(config) as service:
        await service.wait_serving("faq-bot", revision_of(REAL))
