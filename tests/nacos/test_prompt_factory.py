"""The prompt-only factory: local agent files whose system prompt is a Nacos config
(``prompt.ref``), rebuilt when the prompt changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynagent.config import NacosConfig
from dynagent.nacos.client import content_md5
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.agents import model_fields
from tests.support.nacos import NacosAdmin, invoke, nacos_service_config, status_of
from tests.support.service import RunningService, running_service, write_agent


def spec(name: str, key: str, label: str | None, model: dict[str, Any]) -> dict[str, Any]:
    ref = {"key": key, **({"label": label} if label else {})}
    return {
        "name": name,
        "model": model,
        "prompt": {"ref": ref, "variables": {"company": "ACME"}},
    }


def prompt_source(path: Path, data_id: str, text: str, version: str, label: str) -> Any:
    """The status ``source`` of a local spec whose prompt is the Nacos config ``data_id``."""
    return {
        "kind": "file",
        "location": str(path),
        "prompt_key": data_id.split(".", maxsplit=1)[0],
        "prompt_data_id": data_id,
        "prompt_label": label,
        "prompt_version": version,
        "prompt_md5": content_md5(text),
    }


def system_prompt_is(text: str) -> Any:
    def check(body: dict[str, Any]) -> None:
        assert body["messages"][0] == {"role": "system", "content": text}

    return check


def prompt_config(settings: NacosConfig, specs_dir: Path, agents_dir: Path, state_dir: Path) -> Any:
    return nacos_service_config(
        settings,
        agents_dir,
        state_dir,
        factories={"nacos": False, "nacos_prompt": {"directory": str(specs_dir)}},
    )


def serving_revision(service: RunningService, name: str) -> str:
    revision = service.serving(name)
    assert revision is not None
    return revision


async def test_a_prompt_change_rebuilds_the_agent_and_its_status_names_the_prompt(
    model_server: ScriptedModelServer,
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
) -> None:
    prompts = nacos_settings.prompt_group
    first = "You help the customers of {{company}}."
    second = '{"template": "You assist {{company}} staff.", "version": "v2"}'
    model_server.script(
        DEFAULT_MODEL,
        [
            Reply("one", expect=system_prompt_is("You help the customers of ACME.")),
            Reply("two", expect=system_prompt_is("You assist ACME staff.")),
        ],
    )
    await nacos.publish("helper.prod", prompts, first, "text")
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    path = write_agent(specs_dir, spec("helper", "helper", "prod", model_fields(model_server)))
    config = prompt_config(nacos_settings, specs_dir, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.registry.wait_for(lambda _: service.serving("helper") is not None)
        old = serving_revision(service, "helper")
        assert await status_of(service, "helper") == {
            "name": "helper",
            "state": "serving",
            "revision": old,
            "description": "",
            "source": prompt_source(path, "helper.prod", first, content_md5(first)[:8], "prod"),
            "factory": "nacos-prompt",
            "last_error": None,
        }
        code, body = await invoke(service, "helper")
        assert (code, body["output"], body["revision"]) == (200, "one", old)

        await nacos.publish("helper.prod", prompts, second, "json")
        await service.registry.wait_for(lambda _: service.serving("helper") != old)
        new = serving_revision(service, "helper")
        status = await status_of(service, "helper")
        assert (status["revision"], status["source"], status["last_error"]) == (
            new,
            prompt_source(path, "helper.prod", second, "v2", "prod"),
            None,
        )
        code, body = await invoke(service, "helper")
        assert (code, body["output"], body["revision"]) == (200, "two", new)

        # Deleting the prompt is refused like a broken edit: the last good version stays.
        await nacos.delete("helper.prod", prompts)
        await service.wait_error("helper", "prompt not found in Nacos")
        status = await status_of(service, "helper")
        assert (status["revision"], status["last_error"]) == (
            new,
            {
                "source": str(path),
                "path": "prompt.ref",
                "message": f"agent 'helper' {path}: prompt not found in Nacos (prompt.ref: no "
                f"config 'helper.prod' in group '{prompts}' (namespace 'public'))",
            },
        )


async def test_a_missing_prompt_is_a_clear_error_until_it_is_published(
    nacos: NacosAdmin,
    nacos_settings: NacosConfig,
    agents_dir: Path,
    state_dir: Path,
    tmp_path: Path,
) -> None:
    prompts = nacos_settings.prompt_group
    specs_dir = tmp_path / "specs"
    specs_dir.mkdir()
    path = write_agent(specs_dir, spec("helper", "absent", None, {"provider": "test"}))
    config = prompt_config(nacos_settings, specs_dir, agents_dir, state_dir)
    async with running_service(config) as service:
        assert await status_of(service, "helper") == {
            "name": "helper",
            "state": "refused",
            "revision": None,
            "description": "",
            "source": None,
            "factory": None,
            "last_error": {
                "source": str(path),
                "path": "prompt.ref",
                "message": f"agent 'helper' {path}: prompt not found in Nacos (prompt.ref: no "
                f"config 'absent' in group '{prompts}' (namespace 'public'))",
            },
        }
        code, body = await invoke(service, "helper")
        assert (code, body["error"]["type"]) == (503, "unavailable")

        # A prompt published later is found by the reconcile poll and builds the agent.
        await nacos.publish("absent", prompts, "You help {{company}}.", "text")
        await service.registry.wait_for(lambda _: service.serving("helper") is not None)
        status = await status_of(service, "helper")
        assert (status["state"], status["source"], status["last_error"]) == (
            "serving",
            {
                "kind": "file",
                "location": str(path),
                "prompt_key": "absent",
                "prompt_data_id": "absent",
                "prompt_version": content_md5("You help {{company}}.")[:8],
                "prompt_md5": content_md5("You help {{company}}."),
            },
            None,
        )
        code, body = await invoke(service, "helper", "hello")
        echoed = "[test model] you said: hello | prompt: You help ACME."
        assert (code, body["output"]) == (200, echoed)
