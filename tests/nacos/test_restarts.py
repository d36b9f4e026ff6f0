"""What a restart serves: the last version accepted here, never one that was refused; the
same owner of every agent name whatever the order documents load in; and, for a dataId
this machine cannot follow, a refusal that says why and costs nothing more.

"Nacos down" for a restarted service is an address nothing listens on, with the same
snapshot folder: the session's server keeps running for the other tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dynagent.config import NacosConfig
from dynagent.nacos.client import SDK_LOGGER
from tests.support.nacos import (
    NacosAdmin,
    invoke,
    nacos_service_config,
    nacos_source,
    status_of,
    yaml_text,
)
from tests.support.process import free_port
from tests.support.service import RunningService, agent_document, revision_of, running_service

BROKEN = "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\ntemprature: 0.2\n"
"""A definition the service refuses (a misspelt field)."""


def nacos_down(settings: NacosConfig) -> NacosConfig:
    """``settings`` with Nacos unreachable: same groups, same snapshot folder."""
    return settings.model_copy(update={"server_addr": f"127.0.0.1:{free_port()}"})


async def readyz(service: RunningService) -> tuple[int, Any]:
    response = await service.client.get("/readyz")
    return response.status, await response.json()


async def test_a_refused_edit_or_gray_never_replaces_the_last_accepted_copy_across_restarts(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    """A broken formal edit (``bot``) and a broken tag gray aimed at this instance
    (``gray-bot``) are refused while the service keeps serving; a restart with Nacos up
    (it can only read the broken text there) serves the last accepted version with the
    refusal beside it, and one with Nacos down serves exactly what served before."""
    group, tag = nacos_settings.group, "blue-pods"
    settings = nacos_settings.model_copy(update={"gray_tag": tag})
    bot = agent_document("bot", system="The last good bot.")
    formal = agent_document("gray-bot", system="The formal version.")
    gray = agent_document("gray-bot", system="A good gray version.")
    await nacos.publish("bot.agent.yaml", group, yaml_text(bot))
    await nacos.publish("gray-bot.agent.yaml", group, yaml_text(formal))
    await nacos.publish("gray-bot.agent.yaml", group, yaml_text(gray), tag=tag)
    config = nacos_service_config(settings, agents_dir, state_dir)
    served = {"bot": revision_of(bot), "gray-bot": revision_of(gray)}

    async with running_service(config) as service:
        for name, revision in served.items():
            await service.wait_serving(name, revision)
        await nacos.publish("bot.agent.yaml", group, BROKEN)
        await nacos.publish(
            "gray-bot.agent.yaml", group, BROKEN.replace("bot", "gray-bot"), tag=tag
        )
        for name in served:
            await service.wait_error(name, "unknown field 'temprature'")
        assert {name: service.serving(name) for name in served} == served

    snapshot = settings.snapshot_dir / "public" / group
    assert {p.name: p.read_text() for p in snapshot.iterdir()} == {
        "bot.agent.yaml": yaml_text(bot),
        "gray-bot.agent.yaml": yaml_text(gray),
    }

    # Nacos up: it holds only the refused versions for this instance.
    async with running_service(config) as service:
        assert {name: service.serving(name) for name in served} == served
        for name, document in (("bot", bot), ("gray-bot", gray)):
            status = await status_of(service, name)
            data_id = f"{name}.agent.yaml"
            refused = status.pop("last_error")
            assert status == {
                "name": name,
                "state": "serving",
                "revision": served[name],
                "description": "",
                "source": {**nacos_source(group, data_id, yaml_text(document)), "from": "snapshot"},
                "factory": "nacos",
            }
            assert refused["source"] == f"public/{group}/{data_id}"
            assert "unknown field 'temprature'" in refused["message"], refused
            code, body = await invoke(service, name)
            assert (code, body["revision"]) == (200, served[name])

    # Nacos down: what served before the restart serves after it.
    async with running_service(
        nacos_service_config(nacos_down(settings), agents_dir, state_dir)
    ) as service:
        assert {name: service.serving(name) for name in served} == served
        code, ready = await readyz(service)
        assert (code, ready["status"], ready["agents"]) == (
            200,
            "degraded",
            2,
        )  # serving, from the snapshot
        for name, revision in served.items():
            code, body = await invoke(service, name)
            assert (code, body["revision"]) == (200, revision)


async def test_the_document_named_after_an_agent_owns_its_name_whatever_the_load_order(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    """``aaa.agent.yaml`` naming ``faq-bot`` loads before ``faq-bot.agent.yaml``: it is
    refused on its own entry live, after a restart with Nacos up and one with Nacos down;
    published first, it serves only until the document named after the agent comes, and
    again once that one is deleted."""
    group = nacos_settings.group
    faq = agent_document("faq-bot", system="The real faq-bot.")
    impostor = agent_document("faq-bot", system="An impostor.")
    await nacos.publish("aaa.agent.yaml", group, yaml_text(impostor))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    message = (
        f"agent 'aaa' public/{group}/aaa.agent.yaml: this document names agent 'faq-bot', "
        "which faq-bot.agent.yaml already defines; rename it (e.g. name: aaa) or delete it"
    )

    async def owned_by_faq_bot(service: RunningService) -> None:
        await service.wait_serving("faq-bot", revision_of(faq))
        await service.wait_error("aaa", "already defines")
        listed = await (await service.client.get("/v1/agents")).json()
        assert [(a["name"], a["state"]) for a in listed["agents"]] == [
            ("aaa", "refused"),
            ("faq-bot", "serving"),
        ]
        assert (await status_of(service, "faq-bot"))["last_error"] is None
        assert (await status_of(service, "aaa"))["last_error"] == {
            "source": f"public/{group}/aaa.agent.yaml",
            "path": "",
            "message": message,
        }

    async with running_service(config) as service:
        await service.wait_serving("faq-bot", revision_of(impostor))
        await nacos.publish("faq-bot.agent.yaml", group, yaml_text(faq))
        await owned_by_faq_bot(service)

    for settings in (nacos_settings, nacos_down(nacos_settings)):
        restarted = nacos_service_config(settings, agents_dir, state_dir)
        async with running_service(restarted) as service:
            await owned_by_faq_bot(service)
            # aaa.agent.yaml loads first, and never serves the name, not even for a moment.
            history = service.registry.history("faq-bot")
            assert [r.revision for r in history] == [revision_of(faq)]

    async with running_service(config) as service:
        await owned_by_faq_bot(service)
        await nacos.delete("faq-bot.agent.yaml", group)
        await service.wait_serving("faq-bot", revision_of(impostor))
        await service.registry.wait_for(lambda r: "aaa" not in r)


@pytest.fixture
def sdk_errors() -> Iterator[list[str]]:
    """Every error the Nacos SDK logs while the test runs."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Collect(logging.ERROR)
    SDK_LOGGER.addHandler(handler)
    yield lines
    SDK_LOGGER.removeHandler(handler)


async def test_data_ids_too_long_for_the_local_cache_are_refused_and_cost_nothing_more(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    sdk_errors: list[str],
) -> None:
    """The SDK names its local copy of a config ``{dataId}@@{group}@@{namespace}``; past
    255 bytes its write fails and it retried at once, for good (a core's worth of error
    lines), while the agent never showed. The longest dataId whose name fits is served;
    one character more, and the longest dataId Nacos accepts (255), are refused saying
    why, and the SDK is never asked to follow them."""
    group = nacos_settings.group
    fits = 255 - len(f"@@{group}@@")
    suffix = ".agent.yaml"
    names = {length: "x" * (length - len(suffix)) for length in (fits, fits + 1, 251, 255)}
    for length, stem in names.items():
        await nacos.publish(f"{stem}{suffix}", group, yaml_text(agent_document(f"long-{length}")))
    config = nacos_service_config(nacos_settings, agents_dir, state_dir)
    async with running_service(config) as service:
        longest = agent_document(f"long-{fits}")
        await service.wait_serving(f"long-{fits}", revision_of(longest))
        for length in (fits + 1, 251, 255):
            stem = names[length]
            status = await service.wait_error(stem, "dataId too long to follow here")
            over = length + len(f"@@{group}@@")
            assert (status["state"], status["revision"], status["last_error"]["message"]) == (
                "refused",
                None,
                f"agent '{stem}' public/{group}/{stem}{suffix}: dataId too long to follow "
                "here: the Nacos client's local cache names its file after the dataId, "
                f"group and namespace, {over} bytes, and file names here hold 255; shorten "
                f"the dataId by {over - 255} characters",
            )
        # The listen task still works for everything else: a change is pushed and served.
        changed = agent_document(f"long-{fits}", system="Changed.")
        await nacos.publish(f"{names[fits]}{suffix}", group, yaml_text(changed))
        await service.wait_serving(f"long-{fits}", revision_of(changed))
    assert sdk_errors == []


async def test_every_degradation_reason_stays_until_it_clears(
    nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    """Started with Nacos down and a snapshot file it cannot read: the reconnect loop's
    own reason (Nacos still unreachable) joins the skipped file; it never replaces it."""
    settings = nacos_down(nacos_settings)
    snapshot = settings.snapshot_dir / "public" / settings.group
    snapshot.mkdir(parents=True)
    (snapshot / "bot.agent.yaml").write_text(yaml_text(agent_document("bot")))
    (snapshot / "cut.agent.yaml").write_bytes(b"name: cut\nprompt: {system: Gr\xc3")
    source = f"nacos:public/{settings.group}"
    skipped = "unreadable snapshot files skipped: cut.agent.yaml (not valid UTF-8 at byte 29)"
    async with running_service(nacos_service_config(settings, agents_dir, state_dir)) as service:
        assert service.registry.degraded[source].endswith(skipped)
        await service.registry.wait_for(
            lambda r: "serving last known definitions" in r.degraded[source], within=15
        )
        code, ready = await readyz(service)
        assert (code, ready["degraded"][source]) == (
            200,
            f"Nacos unreachable, serving last known definitions: cannot reach Nacos at "
            f"{settings.server_addr}: no answer within 5 s; {skipped}",
        )
