"""Logs: secrets masked wherever they would appear, and the trace id on a run's lines."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from loguru import logger

from dynagent import Tool, ToolRegistry
from dynagent.config import ServiceConfig
from dynagent.core.auth import ApiKeys
from dynagent.logs import MASK, SecretMask, configure_logging, run_line
from dynagent.models import ToolDefinition
from tests.support import DEFAULT_MODEL, CallTools, Reply, ScriptedModelServer
from tests.support.service import agent_document, running_service, service_config

API_KEY = "caller-api-key-1111111111111111"
MODEL_KEY = "sk-model-key-22222222"
ENVIRON = {"DYNAGENT_API_KEYS": API_KEY, "OPENAI_API_KEY": MODEL_KEY}
NO_ARGUMENTS = {"type": "object", "properties": {}}


@dataclass
class Captured:
    mask: SecretMask
    lines: list[str] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)

    def sink(self, message: Any) -> None:
        self.lines.append(str(message))
        self.records.append(message.record)

    def with_text(self, text: str) -> list[dict[str, Any]]:
        return [r for r in self.records if text in r["message"]]


def restore_default_logging() -> None:
    logger.remove()
    logger.configure(patcher=lambda record: None, extra={})
    logger.add(sys.stderr)


@pytest.fixture
def captured() -> Iterator[Captured]:
    """Logging set up as ``dynagent serve`` does, plus a sink keeping every line."""
    mask = configure_logging("DEBUG")
    found = Captured(mask)
    logger.add(found.sink, level="DEBUG", format="{level} | {extra} | {message}", colorize=False)
    yield found
    restore_default_logging()


def register_secrets(mask: SecretMask, config: ServiceConfig) -> None:
    """What ``dynagent.cli.serve`` hands the mask."""
    keys = ApiKeys.load(ENVIRON, config.auth.keys_env, config.auth.keys_file)
    mask.add([*keys.secrets, config.nacos.password, ENVIRON.get("OPENAI_API_KEY", "")])


@pytest.mark.parametrize("stream", [False, True])
async def test_secrets_never_reach_the_log(
    stream: bool,
    captured: Captured,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    async def careless(arguments: dict[str, Any]) -> str:
        # A tool that logs what it should not: the mask must catch it.
        logger.info("calling upstream with {} on behalf of {}", MODEL_KEY, API_KEY)
        return "done"

    tools = ToolRegistry.default()
    tools.register(Tool.of(ToolDefinition("careless", "Logs too much.", NO_ARGUMENTS), careless))
    document = agent_document(
        "bot", model_server, model={"api_key": "${OPENAI_API_KEY}"}, tools=["careless"]
    )
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    config = service_config(agents_dir, state_dir)
    register_secrets(captured.mask, config)
    model_server.script(DEFAULT_MODEL, [CallTools([("careless", {})]), Reply("ok")])

    async with running_service(config, tools=tools, environ=ENVIRON) as service:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        ok = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "stream": stream}, headers=auth
        )
        await ok.read()
        trace_id = ok.headers["X-Trace-Id"]
        wrong = {"Authorization": f"Bearer {API_KEY}x"}
        assert (await service.client.get("/v1/agents", headers=wrong)).status == 401
        # A broken edit whose YAML error quotes the line holding the model key.
        service.write_agent(
            f"name: bot\nmodel: {{api_key: {MODEL_KEY}\n",
            filename="bot.yaml",
        )
        await service.wait_error("bot", "not valid YAML")

    assert ok.status == 200
    leaks = [line for line in captured.lines if API_KEY in line or MODEL_KEY in line]
    assert leaks == []
    masked = [r["message"] for r in captured.records if MASK in r["message"]]
    assert masked[0] == f"calling upstream with {MASK} on behalf of {MASK}"
    assert any("not valid YAML" in m and f"{{api_key: {MASK}" in m for m in masked), masked

    # Every line logged during the run carries its trace id, the tool's too.
    (tool_line,) = captured.with_text("calling upstream")
    (run_line,) = captured.with_text("invoke bot@")
    assert tool_line["extra"]["trace_id"] == run_line["extra"]["trace_id"] == trace_id
    assert run_line["message"].startswith(f"invoke bot@{service.serving('bot')} (stable) ok in")
    assert {r["extra"]["trace_id"] for r in captured.with_text("serving 1 agents")} == {"-"}


def test_json_lines_are_masked_and_carry_the_trace_id(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        mask = configure_logging("INFO", json_lines=True)
        mask.add([MODEL_KEY, "short"])
        logger.bind(trace_id="abc123").info("key {} and word short", MODEL_KEY)
        logger.debug("below the level")
    finally:
        restore_default_logging()
    (line,) = capsys.readouterr().err.splitlines()
    record = json.loads(line)["record"]
    assert (record["message"], record["extra"], record["level"]["name"]) == (
        f"key {MASK} and word short",  # values under 6 characters are not treated as secrets
        {"trace_id": "abc123"},
        "INFO",
    )


def test_text_lines_show_a_dash_outside_runs(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        configure_logging("INFO")
        logger.info("started")
    finally:
        restore_default_logging()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("| INFO    | - | started")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_runs_line_is_loguru_s_line_without_a_loguru_record(
    stream: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
) -> None:
    """The one line every request logs, when the service's text sink is the only sink:
    written as loguru writes it (masked, with the run's trace id), but without building
    a loguru record for it, which cost about a tenth of serving a request."""
    records: list[str] = []
    counted = SecretMask.__call__

    def counting(mask: SecretMask, record: Any) -> None:
        records.append(record["message"])
        counted(mask, record)

    monkeypatch.setattr(SecretMask, "__call__", counting)
    document = agent_document("bot", model_server, model={"api_key": "${OPENAI_API_KEY}"})
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    model_server.script(DEFAULT_MODEL, [Reply(f"ok {MODEL_KEY}")])
    try:
        configure_logging("INFO").add([MODEL_KEY])
        async with running_service(
            service_config(agents_dir, state_dir), environ=ENVIRON
        ) as service:
            auth = {"Authorization": f"Bearer {API_KEY}"}
            ok = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": "hi", "stream": stream}, headers=auth
            )
            await ok.read()
            revision = service.serving("bot")
    finally:
        restore_default_logging()
    trace_id = ok.headers["X-Trace-Id"]
    lines = [line for line in capsys.readouterr().err.splitlines() if "invoke bot@" in line]
    assert [line.split(" | ", 1)[1].rsplit(" ok in ", 1)[0] for line in lines] == [
        f"INFO    | {trace_id} | invoke bot@{revision} (stable)"
    ]
    assert [message for message in records if "invoke bot@" in message] == []


class _OneWriter:
    """A stream that records two writers inside it at once (a line torn by another)."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps = 0
        self.lines: list[str] = []

    def write(self, text: str) -> None:
        self.inside += 1
        if self.inside > 1:
            self.overlaps += 1
        time.sleep(0.0005)  # a slow terminal or pipe: the window another writer would use
        self.lines.append(text)
        self.inside -= 1

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_a_runs_line_and_loguru_lines_from_threads_never_write_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run's line skips loguru's handler and its lock; threads log through loguru."""
    stream = _OneWriter()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        configure_logging("INFO")

        def loguru_lines() -> None:
            for index in range(40):
                logger.info("thread line {}", index)

        def run_lines() -> None:
            for index in range(40):
                run_line("INFO", "t", f"run line {index}")

        workers = [threading.Thread(target=f) for f in (loguru_lines, run_lines, run_lines)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        restore_default_logging()
    assert stream.overlaps == 0
    assert len(stream.lines) == 120
