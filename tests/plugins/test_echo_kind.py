"""A tool kind from a third-party package: ``tests/plugins/dynagent-echo-kind`` installed
with pip into a folder of its own, found by fresh processes through its entry point in
``dynagent.tool_kinds`` (as ``docs/plugins.md`` tells a plugin's author)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PLUGIN = Path(__file__).parent / "dynagent-echo-kind"

AGENT = """\
name: echoer
prompt: {system: Repeat what you are told.}
model: {provider: test}
tools:
  - calculator
  - {type: echo, name: shout, prefix: "you said: "}
"""

RUN = """\
import asyncio, json, sys
from pathlib import Path

from dynagent import AgentBuilder
from dynagent.sources.files import load_agent_file

async def main() -> None:
    agent = AgentBuilder().build(load_agent_file(Path(sys.argv[1])))
    result = await agent.run("hello")
    calls = {e.call_id: json.loads(e.arguments) for e in result.events if e.type == "tool_call"}
    print(json.dumps([
        [e.name, calls[e.call_id], e.output, e.is_error]
        for e in result.events if e.type == "tool_result" and e.name == "shout"
    ]))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed the way a user installs one (a wheel built from its folder),
    offline: no index, the build backend of this environment."""
    work = tmp_path_factory.mktemp("echo-kind")
    source = shutil.copytree(PLUGIN, work / "source")  # the build writes into its folder
    site = work / "site"
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
    command += ["--no-build-isolation", "--target", str(site), str(source)]
    subprocess.run(command, check=True, timeout=300, capture_output=True)
    return site


def dynagent(*args: str, path: list[Path], cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    environ["PYTHONPATH"] = os.pathsep.join(map(str, [*path, ROOT / "service"]))
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        env=environ,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def agent_file(tmp_path: Path) -> Path:
    path = tmp_path / "echoer.yaml"
    path.write_text(AGENT)
    return path


def test_an_agent_with_the_plugins_kind_validates_and_runs(
    plugin_site: Path, agent_file: Path
) -> None:
    checked = dynagent(
        "-m", "dynagent", "validate", str(agent_file), path=[plugin_site], cwd=agent_file.parent
    )
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"{agent_file}: ok (echoer, revision ")

    script = agent_file.parent / "run.py"
    script.write_text(RUN)
    ran = dynagent(str(script), str(agent_file), path=[plugin_site], cwd=agent_file.parent)
    assert ran.returncode == 0, ran.stderr
    [[name, arguments, output, is_error]] = json.loads(ran.stdout)
    assert (name, is_error) == ("shout", False)
    assert output == "you said: " + arguments["text"]


def test_the_plugins_entries_are_checked_and_in_the_schema(
    plugin_site: Path, agent_file: Path
) -> None:
    agent_file.write_text(AGENT.replace("prefix:", "prefx:"))

    checked = dynagent(
        "-m", "dynagent", "validate", str(agent_file), path=[plugin_site], cwd=agent_file.parent
    )
    assert checked.returncode == 1
    assert (
        "  tools[shout].prefx: unknown field 'prefx' in tools[shout]; did you mean 'prefix'?"
        in checked.stderr.splitlines()
    )

    schema = json.loads(dynagent("-m", "dynagent", "schema", path=[plugin_site], cwd=ROOT).stdout)
    assert schema["$defs"]["EchoToolSpec"]["properties"]["type"]["const"] == "echo"
    assert {"$ref": "#/$defs/EchoToolSpec"} in schema["properties"]["tools"]["items"]["oneOf"]


def test_without_the_plugin_the_same_agent_is_refused_naming_the_type(agent_file: Path) -> None:
    checked = dynagent(
        "-m", "dynagent", "validate", str(agent_file), path=[], cwd=agent_file.parent
    )

    assert checked.returncode == 1
    assert checked.stderr.splitlines() == [
        f"{agent_file}: invalid agent definition",
        "  tools[shout].type: unknown tool type 'echo'; known types: agent, http, mcp, ref",
    ]
