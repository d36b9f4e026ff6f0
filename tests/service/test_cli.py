"""The ``dynagent`` command: validate, schema, serve's safety check, and the client commands
against a real ``dynagent serve`` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from loguru import logger

from dynagent import cli
from tests.support.process import DYNAGENT, dynagent_serving, free_port

ROOT = Path(__file__).parents[2]
SAMPLES = ROOT / "config-samples"
AGENT_FILES = sorted(p for p in (SAMPLES / "agents").glob("*.yaml") if ".evals." not in p.name)
SUITE_FILES = sorted((SAMPLES / "agents").glob("*.evals.yaml"))
"""The sample agents' evaluation suites (``{name}.evals.yaml``)."""
API_KEY = "cli-test-key-0123456789abcdef"


@pytest.fixture
def offline_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No model endpoint and no keys from the outside environment."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL", "DYNAGENT_API_KEYS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """``serve`` configures loguru for the process; put the default back afterwards."""
    yield
    logger.remove()
    logger.configure(patcher=lambda record: None, extra={})
    logger.add(sys.stderr)


@pytest.mark.usefixtures("offline_environment")
def test_validate_accepts_every_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["validate", *map(str, AGENT_FILES + SUITE_FILES)]) == 0
    out = capsys.readouterr().out.splitlines()
    suites, out = out[len(AGENT_FILES) :], out[: len(AGENT_FILES)]
    assert [line.split(", revision")[0] for line in suites] == [
        f"{path}: ok (evaluation suite of {path.name.split('.')[0]}" for path in SUITE_FILES
    ]
    assert SUITE_FILES
    assert [line.split(": ok (")[0] for line in out] == [str(p) for p in AGENT_FILES]
    assert [line.split(": ok (")[1].split(",")[0] for line in out] == [
        "assistant",  # assistant.canary.yaml
        "assistant",
        "concierge",
        "librarian",
        "support-bot",
        "ticket-triage",
    ]


@pytest.mark.usefixtures("offline_environment")
def test_validate_refuses_a_bad_suite_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bot.evals.yaml"
    bad.write_text("cases:\n  - {id: a, input: hi, assert: [{type: contains, valu: x}]}\n")
    assert cli.main(["validate", str(bad)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{bad}: invalid evaluation suite",
        "  cases[#1].assert[#1].value: Field required",
        "  cases[#1].assert[#1].valu: unknown field 'valu' in cases[#1].assert[#1]; "
        "did you mean 'value'?",
    ]


BAD_FILES = {
    "fields.yaml": (
        "name: Bad_Name\nprompt: {system: x}\ntools: [{name: calculator, timeout: -1}]\nbogus: 1\n",
        [
            "invalid agent definition",
            "  name: String should match pattern '^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?$'",
            "  tools[calculator].timeout: Input should be greater than 0",
            "  bogus: unknown field 'bogus'; known fields: client_tools, description, "
            "interceptors, limits, model, name, output, parallel_tool_calls, prompt, tools",
        ],
    ),
    "tool.yaml": (
        "name: bad-tool\nprompt: {system: x}\ntools: [nope]\n",
        [
            "unknown tool",
            "  tools[nope]: no tool named 'nope' is registered; known: calculator, current_time",
        ],
    ),
    "interceptor.yaml": (
        "name: bad-limit\nprompt: {system: x}\ninterceptors: [{tool_call_limit: {max: 0}}]\n",
        [
            "invalid interceptor settings",
            "  interceptors[tool_call_limit].max: Input should be greater than or equal to 1",
        ],
    ),
    "yaml.json": ('{"name": "x",', None),
}


@pytest.mark.usefixtures("offline_environment")
def test_validate_names_each_bad_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for filename, (text, _) in BAD_FILES.items():
        paths.append(tmp_path / filename)
        paths[-1].write_text(text, encoding="utf-8")
    good = AGENT_FILES[0]
    missing = tmp_path / "missing.yaml"

    assert cli.main(["validate", *map(str, paths), str(good), str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{good}: ok (assistant, revision ")
    errors = captured.err.splitlines()
    expected: list[str] = []
    for path, (_, lines) in zip(paths, BAD_FILES.values(), strict=True):
        if lines is None:  # the parser's own words follow
            assert errors[len(expected)].startswith(f"{path}: not valid JSON: ")
            expected.append(errors[len(expected)])
        else:
            expected += [f"{path}: {lines[0]}", *lines[1:]]
    expected.append(f"{missing}: cannot read: [Errno 2] No such file or directory: '{missing}'")
    assert errors == expected


@pytest.mark.usefixtures("offline_environment")
def test_validate_checks_a_canary_file_as_the_service_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = "model: {provider: test}\nprompt: {system: hi}\n"
    files = {
        "bot.canary.yaml": f"name: bot\n{spec}rollout: {{weight: 5}}\n",
        "ghost.canary.yaml": f"name: bot\n{spec}rollout: {{weight: 5}}\n",
        "norollout.canary.yaml": f"name: norollout\n{spec}",
    }
    for filename, text in files.items():
        (tmp_path / filename).write_text(text, encoding="utf-8")
    paths = [str(tmp_path / filename) for filename in files]

    assert cli.main(["validate", *paths]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"{paths[0]}: ok (bot, revision ")
    assert captured.err.splitlines() == [
        f"{paths[1]}: a canary must define the agent its file is named after",
        "  name: expected 'ghost', found 'bot'",
        f"{paths[2]}: a canary needs a rollout block",
        "  rollout: add e.g. 'rollout: {weight: 10}'",
    ]


def test_schema_is_a_json_schema_that_the_samples_match(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in AGENT_FILES:
        document = yaml.safe_load(path.read_text())
        if path.name.endswith(".canary.yaml"):  # a spec plus its rollout block
            assert isinstance(document.pop("rollout"), dict)
        assert list(validator.iter_errors(document)) == [], path
    wrong = {"name": "x", "prompt": {"system": "y"}, "tools": [{"type": "http"}], "bogus": 1}
    assert not validator.is_valid(wrong)


@pytest.mark.usefixtures("offline_environment", "restore_logging")
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com"])
def test_serve_refuses_a_public_address_without_auth(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(
        "dynagent.http.serving.run", lambda app, sock, on_started: started.append({"sock": sock})
    )
    # The socket serve binds before the app starts; here, the address it would bind.
    monkeypatch.setattr("dynagent.cli.serve._listen_socket", lambda host, port: (host, port))
    config = str(SAMPLES / "service.yaml")

    assert cli.main(["serve", "--config", config, "--host", host]) == 2
    assert started == []
    assert cli.main(["serve", "--config", config, "--host", host, "--insecure"]) == 0
    monkeypatch.setenv("DYNAGENT_API_KEYS", API_KEY)
    assert cli.main(["serve", "--config", config, "--host", host, "--port", "8123"]) == 0
    assert [o["sock"] for o in started] == [(host, 8090), (host, 8123)]


@pytest.mark.usefixtures("offline_environment", "restore_logging")
@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_serve_allows_loopback_without_auth(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[Any] = []
    monkeypatch.setattr(
        "dynagent.http.serving.run", lambda app, sock, on_started: started.append({"sock": sock})
    )
    monkeypatch.setattr("dynagent.cli.serve._listen_socket", lambda host, port: (host, port))
    assert cli.main(["serve", "--config", str(SAMPLES / "service.yaml"), "--host", host]) == 0
    assert [o["sock"][0] for o in started] == [host]


def test_a_bad_service_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "service.yaml"
    config.write_text("listen: {port: -1}\n", encoding="utf-8")
    assert cli.main(["serve", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"error: {config}: invalid service config "
        "(listen.port: Input should be greater than or equal to 0)\n"
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """``dynagent serve`` on the sample config in a real process, keys required."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DYNAGENT_"))}
    environ |= {
        "DYNAGENT_SESSIONS_PATH": str(tmp_path / "sessions.db"),
        "DYNAGENT_API_KEYS": API_KEY,
    }
    with dynagent_serving(["--config", str(SAMPLES / "service.yaml")], environ) as url:
        yield url
    assert (tmp_path / "sessions.db").is_file()


def dynagent(*args: str, key: str | None = API_KEY) -> tuple[int, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("DYNAGENT_")}
    if key is not None:
        environ["DYNAGENT_API_KEY"] = key
    done = subprocess.run(
        [str(DYNAGENT), *args], check=False, env=environ, capture_output=True, text=True, timeout=60
    )
    return done.returncode, json.loads(done.stdout) if done.stdout else done.stderr


@pytest.mark.slow  # a `dynagent serve` and one `dynagent` process per command
def test_the_client_commands_against_a_running_service(served: str) -> None:
    code, listed = dynagent("agents", "--url", served)
    assert (code, [a["name"] for a in listed["agents"]]) == (
        0,
        ["assistant", "concierge", "librarian", "support-bot", "ticket-triage"],
    )
    assert {a["state"] for a in listed["agents"]} == {"serving"}

    code, answer = dynagent(
        "invoke", "assistant", "hello", "--url", served, "--var", "company=Initech"
    )
    assert code == 0
    # The sample canary takes 10% of the callers; this API key's bucket (8.4) is one of them.
    assert {k: answer[k] for k in ("output", "agent", "variant", "session_id", "steps")} == {
        "output": "[test model] you said: hello | prompt: You are the friendly assistant of "
        "Initech. Answer warmly, in at most three sentences.",
        "agent": "assistant",
        "variant": "canary",
        "session_id": None,
        "steps": 1,
    }
    code, answer = dynagent("invoke", "assistant", "again", "--url", served, "--session", "s1")
    assert (code, answer["session_id"], answer["variant"]) == (0, "s1", "stable")  # bucket 45.4

    code, error = dynagent("invoke", "nobody", "hello", "--url", served)
    assert (code, error["error"]["type"]) == (1, "not_found")
    code, error = dynagent("agents", "--url", served, key=None)
    assert (code, error["error"]["type"]) == (1, "unauthorized")
    code, error = dynagent("agents", "--url", served, "--api-key", "wrong-key-0123456789", key=None)
    assert (code, error["error"]["type"]) == (1, "unauthorized")


def test_the_client_commands_say_when_no_service_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    code, message = dynagent("agents", "--url", url)
    assert code == 3
    assert message.startswith(f"error: cannot reach the service at {url}: ")
