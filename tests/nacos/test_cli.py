"""``dynagent publish DIR --nacos`` and ``dynagent serve --nacos``, as real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.nacos import NacosAdmin, NacosServer, nacos_source, without_since
from tests.support.process import dynagent_serving, free_port

ROOT = Path(__file__).parents[2]
SAMPLES = ROOT / "config-samples" / "agents"
NOTES_SERVER = ROOT / "config-samples" / "mcp" / "notes_server.py"
DYNAGENT = Path(sys.executable).parent / "dynagent"
SAMPLE_NAMES = ["assistant", "concierge", "librarian", "support-bot", "ticket-triage"]


def offline_environ() -> dict[str, str]:
    """No model endpoint, keys or Dynagent/Nacos settings from the outside environment."""
    prefixes = ("OPENAI_", "DYNAGENT_", "NACOS_")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}


def dynagent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DYNAGENT), *args],
        env=offline_environ(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def service_yaml(tmp_path: Path) -> Path:
    """A service config with no local agents that declares the samples' MCP server."""
    empty = tmp_path / "no-local-agents"
    empty.mkdir()
    config = tmp_path / "service.yaml"
    config.write_text(
        f"factories: {{default: {{directory: {empty}}}}}\n"
        "sessions: {store: memory}\n"
        f"nacos: {{snapshot_dir: {tmp_path / 'snapshot'}, poll_seconds: 0.5}}\n"
        # The MCP sample names the stdio server its service config declares.
        f"mcp_servers: {{notes: {{command: python, args: [{NOTES_SERVER}]}}}}\n",
        encoding="utf-8",
    )
    return config


@pytest.fixture
def serve_nacos(nacos_server: NacosServer, nacos_group: str, service_yaml: Path) -> Iterator[str]:
    """``dynagent serve --nacos HOST:PORT --group G`` in a real process; its base URL."""
    args = ["--config", str(service_yaml), "--nacos", nacos_server.addr, "--group", nacos_group]
    with dynagent_serving(args, offline_environ()) as url:
        yield url


def sample_documents() -> dict[str, str]:
    """dataId → text, as ``dynagent publish`` names the sample files: ``{name}.agent.yaml``,
    ``{name}.canary.yaml`` for a canary file and ``{name}.evals.yaml`` for a suite."""
    documents = {}
    for path in sorted(SAMPLES.glob("*.yaml")):
        text = path.read_text(encoding="utf-8")
        if ".evals." in path.name:  # an agent's evaluation suite, published beside it
            documents[path.name] = text
            continue
        kind = "canary" if ".canary." in path.name else "agent"
        documents[f"{yaml.safe_load(text)['name']}.{kind}.yaml"] = text
    return documents


async def test_publish_then_serve_lists_every_sample(
    nacos_server: NacosServer,
    nacos: NacosAdmin,
    nacos_group: str,
    service_yaml: Path,
    request: pytest.FixtureRequest,
) -> None:
    documents = sample_documents()
    done = dynagent(
        "publish", str(SAMPLES), "--config", str(service_yaml),
        "--nacos", nacos_server.addr, "--group", nacos_group,
    )  # fmt: skip
    assert (done.returncode, done.stdout.splitlines()) == (
        0,
        [f"published public/{nacos_group}/{data_id}" for data_id in documents],
    )
    assert await nacos.data_ids(nacos_group) == sorted(documents)
    stored = {data_id: await nacos.get(data_id, nacos_group) for data_id in documents}
    assert {data_id: (config or {}).get("content") for data_id, config in stored.items()} == (
        documents
    )

    url: str = request.getfixturevalue("serve_nacos")
    listed = get_json(f"{url}/v1/agents")["agents"]
    assert [(a["name"], a["state"], a["factory"], without_since(a["source"])) for a in listed] == [
        (name, "serving", "nacos", nacos_source(nacos_group, f"{name}.agent.yaml", text))
        for name, text in (
            (data_id.split(".")[0], text)
            for data_id, text in documents.items()
            if data_id.endswith(".agent.yaml")
        )
    ]
    assert [a["name"] for a in listed] == SAMPLE_NAMES
    suites = {a["name"]: a["evals"]["state"] for a in listed if "evals" in a}
    assert suites == {name.split(".")[0]: "valid" for name in documents if ".evals." in name}
    canaries = {
        a["name"]: without_since(a["canary"]["source"]) for a in listed if a["canary"] is not None
    }
    assert canaries == {
        data_id.split(".")[0]: nacos_source(nacos_group, data_id, text)
        for data_id, text in documents.items()
        if data_id.endswith(".canary.yaml")
    }


async def test_publish_refuses_a_folder_with_an_invalid_file_and_publishes_nothing(
    nacos_server: NacosServer, nacos: NacosAdmin, nacos_group: str, tmp_path: Path
) -> None:
    (tmp_path / "assistant.yaml").write_text(
        (SAMPLES / "assistant.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    broken = tmp_path / "zz-broken.yaml"
    broken.write_text("name: broken\nmodel: {provider: test}\nprompt: {sytem: hi}\n")

    done = dynagent("publish", str(tmp_path), "--nacos", nacos_server.addr, "--group", nacos_group)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(f"not published: agent 'broken' {broken}: invalid agent")
    assert "prompt.sytem: unknown field 'sytem' in prompt; did you mean 'system'?" in done.stderr
    assert await nacos.data_ids(nacos_group) == []


async def test_publish_refuses_a_folder_with_an_invalid_suite_and_publishes_nothing(
    nacos_server: NacosServer, nacos: NacosAdmin, nacos_group: str, tmp_path: Path
) -> None:
    (tmp_path / "assistant.yaml").write_text(
        (SAMPLES / "assistant.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )
    broken = tmp_path / "assistant.evals.yaml"
    broken.write_text("cases: [{id: a, input: hi, assert: [{type: contains, valu: x}]}]\n")

    done = dynagent("publish", str(tmp_path), "--nacos", nacos_server.addr, "--group", nacos_group)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        f"not published: agent 'assistant' {broken}: invalid evaluation suite"
    )
    assert "cases[#1].assert[#1].valu: unknown field 'valu'" in done.stderr
    assert await nacos.data_ids(nacos_group) == []


async def test_publish_refuses_an_agent_naming_a_stdio_server_its_config_does_not_declare(
    nacos_server: NacosServer, nacos: NacosAdmin, nacos_group: str, tmp_path: Path
) -> None:
    """Served by a config without that server, the agent would be refused: the samples'
    ``librarian`` published with no config (or one lacking ``notes``) publishes nothing."""
    for config in (None, "mcp_servers: {other: {command: python, args: [x.py]}}\n"):
        args = ["publish", str(SAMPLES), "--nacos", nacos_server.addr, "--group", nacos_group]
        if config is not None:
            (tmp_path / "service.yaml").write_text(config, encoding="utf-8")
            args += ["--config", str(tmp_path / "service.yaml")]
        known = "none" if config is None else "other"
        done = dynagent(*args)
        assert (done.returncode, done.stdout) == (1, "")
        assert done.stderr.startswith("not published: agent 'librarian'"), done.stderr
        assert (
            "tools[notes].server: no MCP server 'notes' in mcp_servers of the service config; "
            f"known: {known} (use the config of the service that will serve it: --config)"
        ) in done.stderr
        assert await nacos.data_ids(nacos_group) == []


async def test_publish_refuses_a_spec_the_service_could_not_build(
    nacos_server: NacosServer, nacos: NacosAdmin, nacos_group: str, tmp_path: Path
) -> None:
    (tmp_path / "bot.yaml").write_text(
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\ntools: [no_such_tool]\n"
    )

    done = dynagent("publish", str(tmp_path), "--nacos", nacos_server.addr, "--group", nacos_group)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.startswith(
        "not published: agent 'bot': unknown tool (tools[no_such_tool]: no tool"
    )
    assert await nacos.data_ids(nacos_group) == []


def test_publish_says_when_nacos_cannot_be_reached(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    config = ("--config", str(SAMPLES.parent / "nacos.yaml"))
    done = dynagent("publish", str(SAMPLES), *config, "--nacos", address, "--group", "unreachable")
    assert (done.returncode, done.stdout, done.stderr) == (
        3,
        "",
        f"error: cannot reach Nacos at {address}: no answer within 5 s; nothing was published\n",
    )
