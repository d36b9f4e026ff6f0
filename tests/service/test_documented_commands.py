"""The README's and docs' commands, as a reader types them: every shell block is marked
runnable (and run by a test) or skipped with its reason, the blocks of ``make run``'s
service run verbatim against it, and every sample builds under the config of every
documented way to serve it (``tests/support/docs.py`` says how blocks are run)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from dynagent.config import ServiceConfig, load_config
from dynagent.evals import is_suite_key
from dynagent.exceptions import ConfigError
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.files import is_agent_file, load_agent_file
from tests.support.docs import (
    ACTIONS,
    ROOT,
    SERVICES,
    Workspace,
    addressed,
    blocks,
    make_run_command,
    of_service,
)
from tests.support.process import free_port

SAMPLES = ROOT / "config-samples" / "agents"


def test_every_shell_block_is_marked_runnable_or_skipped_with_a_reason() -> None:
    found = blocks()
    shell = [b for b in found if b.shell]
    assert len(shell) >= 10
    assert [b.where for b in shell if b.action == "unmarked"] == []
    assert [b.where for b in found if b.action not in (*ACTIONS, "unmarked")] == []
    assert [b.where for b in found if b.action == "skip" and len(b.words) < 3] == []
    runnable = [b for b in found if b.action in ("run", "setup", "publish")]
    assert [b.where for b in runnable if b.service not in SERVICES] == []
    assert {b.service for b in runnable} == set(SERVICES)
    assert [b.where for b in found if b.action == "publish" and len(b.words) != 2] == []


def _serve_configs() -> dict[str, Path | None]:
    """Where a documented way to serve the samples reads its service config from: ``make
    run``, the image's command, and each ``dynagent serve`` line of a runnable block."""
    commands = {"make run": make_run_command()}
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8").splitlines()
    cmd = " ".join(json.loads(next(line for line in dockerfile if line.startswith("CMD "))[4:]))
    environment = " ".join(line[4:] for line in dockerfile if line.startswith("ENV "))
    default = next(
        (w.split("=", 1)[1] for w in environment.split() if w.startswith("DYNAGENT_CONFIG=")), ""
    )  # serve's --config defaults to it
    if "--config" not in cmd and default:
        cmd += f" --config {default}"
    commands["the image"] = cmd.replace("/app/", "")
    for block in blocks():
        if block.action in ("run", "setup"):
            for line in block.text.splitlines():
                if "dynagent serve" in line:
                    commands[f"{block.where}: {line.strip()}"] = line.split("#", 1)[0]
    configs: dict[str, Path | None] = {}
    for where, command in commands.items():
        words = shlex.split(command)
        configs[where] = ROOT / words[words.index("--config") + 1] if "--config" in words else None
    return configs


def _refusals(config: ServiceConfig) -> list[str]:
    """Why samples would not build under ``config``: a stdio MCP server they name that it
    does not declare, and what ``dynagent publish`` checks."""
    builder = AgentBuilder(offline=True, features=(config,))
    refused = []
    for path in sorted(SAMPLES.iterdir()):
        if not is_agent_file(path) or is_suite_key(path.name):  # a suite names no server
            continue
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for entry in document.get("tools", []):
            if isinstance(entry, dict) and entry.get("server") not in (None, *config.mcp_servers):
                refused.append(f"{path.name}: MCP server {entry['server']} is not declared")
        try:
            builder.build(load_agent_file(path))
        except ConfigError as exc:
            refused.append(f"{path.name}: {exc}")
    return refused


def test_every_sample_builds_under_the_config_of_every_documented_way_to_serve_it() -> None:
    """A definition names a stdio MCP server only the service config may start: a path
    whose config lacks it refused ``librarian`` (and so ``concierge``'s calls to it)."""
    configs = _serve_configs()
    assert {"make run", "the image"} < set(configs)
    assert any("nacos" in where for where in configs), configs
    refused = {where: _refusals(load_config(path, environ={})) for where, path in configs.items()}
    assert refused == {where: [] for where in configs}
    for path in {p for p in configs.values() if p is not None}:
        for server in load_config(path, environ={}).mcp_servers.values():
            script = (server.cwd or path.parent) / server.args[0]
            assert script.is_file(), f"{path}: {script} does not exist"


@pytest.mark.slow  # a `dynagent serve` process and a `dynagent` process per CLI line
def test_the_blocks_of_make_runs_service_run_verbatim(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    workspace = Workspace(tmp_path, {"DYNAGENT_PORT": str(port), "DYNAGENT_URL": url})
    ran = []
    with workspace.serving(make_run_command(), url):
        for block in of_service("files"):
            assert block.action == "run", block.where
            ran.append(workspace.run(block, addressed(block.text, port)))
    assert len(ran) >= 5
    assert '"variant": "canary"' in "".join(ran)  # the canary section split the callers
