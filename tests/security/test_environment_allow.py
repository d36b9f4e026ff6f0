"""A definition reads only the environment variables the service config allows
(``environment.allow``), never a service secret; every value it takes from the
environment into a credential (``api_key``, ``base_url`` credentials, headers) is masked
by value wherever it could surface: events, SSE streams, traces, status, metrics, logs."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from loguru import logger
from pytest_aiohttp import AiohttpServer

from dynagent import AgentBuilder, ConfigError, Tool, ToolRegistry, load_spec
from dynagent.config import ServiceConfig
from dynagent.logs import configure_logging
from dynagent.masking import MASK, SecretValues, StreamMask
from dynagent.models import ToolDefinition
from dynagent.runtime.environment import service_policy
from tests.support import CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    running_service,
    service_config,
)

ADMIN = "admin-key-0123456789abcdef0123"
MODEL_KEY = "sk-model-key-0123456789abcdef"
PROXY_PASSWORD = "proxy-pass-0123456789"
TOOL_TOKEN = "tool-token-0123456789abcdef"
ENVIRON = {
    "DYNAGENT_ADMIN_KEYS": ADMIN,
    "NACOS_PASSWORD": "nacos-pass-0123456789",
    "OPENAI_API_KEY": MODEL_KEY,
    "OPENAI_PROXY_PASSWORD": PROXY_PASSWORD,
    "ORDERS_TOKEN": TOOL_TOKEN,
    "HOME": "/home/dynagent",
    "MY_ADMINS": "other-admin-key-0123456789",
}
SECRETS = (ADMIN, MODEL_KEY, PROXY_PASSWORD, TOOL_TOKEN)
NO_ARGUMENTS = {"type": "object", "properties": {}}


def build(model: dict[str, Any], environ: dict[str, str], **policy: Any) -> None:
    spec = load_spec({"name": "bot", "model": model, "prompt": {"system": "x"}})
    AgentBuilder(environ=environ, **policy).build(spec)


def issues(error: pytest.ExceptionInfo[ConfigError]) -> list[tuple[str, str]]:
    return [(issue.path, issue.message) for issue in error.value.issues]


def not_allowed(name: str) -> str:
    return (
        f"environment variable {name} is not in the service's environment.allow; "
        "add it (or a pattern) there to let definitions read it"
    )


def service_secret(name: str) -> str:
    return f"environment variable {name} is a secret of the service; no definition may read it"


@pytest.mark.parametrize(
    "model, path, name",
    [
        (
            {"provider": "test", "name": "m-${DYNAGENT_ADMIN_KEYS}"},
            "model.name",
            "DYNAGENT_ADMIN_KEYS",
        ),
        (
            {"provider": "test", "name": "${DYNAGENT_API_KEYS:-x}"},
            "model.name",
            "DYNAGENT_API_KEYS",
        ),
        ({"provider": "test", "name": "${NACOS_PASSWORD}"}, "model.name", "NACOS_PASSWORD"),
        ({"provider": "test", "name": "${MY_ADMINS}"}, "model.name", "MY_ADMINS"),
    ],
)
def test_service_secrets_are_never_expanded_even_when_a_pattern_allows_them(
    model: dict[str, Any], path: str, name: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build(model, ENVIRON, environment=service_policy(["*"], ["MY_ADMINS"]))
    assert issues(caught) == [(path, service_secret(name))]


@pytest.mark.parametrize(
    "model, path, name",
    [
        ({"provider": "test", "name": "${HOME}"}, "model.name", "HOME"),
        ({"provider": "test", "name": "${HOME:-default}"}, "model.name", "HOME"),
        (
            {"provider": "openai", "base_url": "http://127.0.0.1/v1", "api_key": "${MY_ADMINS}"},
            "model.api_key",
            "MY_ADMINS",
        ),
        (
            {"provider": "openai", "base_url": "http://${HOME}/v1", "api_key": "x"},
            "model.base_url",
            "HOME",
        ),
    ],
)
def test_names_outside_the_allow_list_are_a_build_error_naming_them(
    model: dict[str, Any], path: str, name: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        build(model, ENVIRON)
    assert issues(caught) == [(path, not_allowed(name))]


def test_the_default_allow_list_and_the_configured_one() -> None:
    assert ServiceConfig().environment.allow == ["OPENAI_*", "DASHSCOPE_*", "DYNAGENT_MODEL_*"]
    config = ServiceConfig.model_validate({"environment": {"allow": ["ORDERS_TOKEN", "CRM_*"]}})
    assert config.environment.allow == ["ORDERS_TOKEN", "CRM_*"]
    crm = service_policy(config.environment.allow, [])
    build({"provider": "test", "name": "${OPENAI_MODEL:-gpt}"}, ENVIRON)  # allowed by default
    build({"provider": "test", "name": "${CRM_MODEL:-gpt}"}, ENVIRON, environment=crm)


@pytest.fixture
def logged() -> Iterator[list[str]]:
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message} {extra}")
    yield lines
    logger.remove(sink)


@pytest.fixture
async def echo_api(aiohttp_server: AiohttpServer) -> str:
    """A tool API that echoes the token header it was sent (as a careless API would)."""

    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=f"token was {request.headers.get('X-Token')}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", echo)
    server = await aiohttp_server(app, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}"


async def readable(service: RunningService, trace_id: str) -> str:
    texts = []
    for path in ("/v1/agents", "/v1/agents/bot", "/metrics", f"/v1/traces/{trace_id}"):
        async with service.client.get(path, headers={"Authorization": f"Bearer {ADMIN}"}) as r:
            assert r.status == 200, path
            texts.append(await r.text())
    return "\n".join(texts)


@pytest.mark.parametrize("stream", [True, False])
async def test_values_from_the_environment_in_credentials_never_surface(
    stream: bool,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    echo_api: str,
    logged: list[str],
) -> None:
    tool = {
        "type": "http",
        "name": "orders",
        "url": f"{echo_api}/orders",
        "headers": {"X-Token": "${ORDERS_TOKEN}"},
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
    }
    model = {"api_key": "${OPENAI_API_KEY}", "name": "gpt-${OPENAI_API_KEY}"}
    document = agent_document("bot", model_server, model=model, tools=[tool])
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    # Another agent, never called, behind a proxy whose password is in its base_url: the
    # secrets are one set, so bot's events mask that password too.
    proxied = model_server.base_url.replace("http://", "http://proxy:${OPENAI_PROXY_PASSWORD}@")
    other = agent_document("proxied", model_server, model={"base_url": proxied})
    (agents_dir / "proxied.yaml").write_text(json.dumps(other), encoding="utf-8")
    # A model that repeats every secret it could have learnt.
    model_server.script(
        f"gpt-{MODEL_KEY}",
        [
            CallTools([("orders", {})], text=f"using {MODEL_KEY}"),
            Reply(f"{PROXY_PASSWORD} {TOOL_TOKEN} {MODEL_KEY} {ADMIN}"),
        ],
    )
    config = service_config(
        agents_dir, state_dir, environment={"allow": ["OPENAI_*", "ORDERS_TOKEN"]}
    )
    async with running_service(config, environ=ENVIRON) as service:
        async with service.client.post(
            "/v1/agents/bot/invoke",
            json={"input": "hi", "stream": stream},
            headers={"Authorization": f"Bearer {ADMIN}"},
        ) as response:
            assert response.status == 200
            answer = await response.text()
            trace_id = response.headers["X-Trace-Id"]
        trace = await (
            await service.client.get(
                f"/v1/traces/{trace_id}", headers={"Authorization": f"Bearer {ADMIN}"}
            )
        ).json()
        texts = answer + await readable(service, trace_id)

    if not stream:
        assert json.loads(answer)["output"] == f"using {MASK}\n\n" + " ".join([MASK] * 4)
    events = [(event["type"], event) for event in trace["events"]]
    if stream:
        assert [name for name, _ in parse_sse(answer)] == [name for name, _ in events]
    request_event = next(data for name, data in events if name == "model_request")
    assert request_event["model"] == f"gpt-{MASK}"
    (tool_result,) = [data for name, data in events if name == "tool_result"]
    assert tool_result["output"] == f"token was {MASK}"
    (final,) = [data for name, data in events if name == "final_output"]
    assert final["output"] == f"using {MASK}\n\n" + " ".join([MASK] * 4)
    assert [secret for secret in SECRETS if secret in texts] == []
    assert [line for line in logged for secret in SECRETS if secret in line] == []


def test_the_mask_hides_a_longer_secret_whole() -> None:
    values = SecretValues(["abcdef", "abcdefghij", "short"])
    assert values.mask("x abcdefghij y abcdef") == f"x {MASK} y {MASK}"
    assert len(values) == 2  # under 6 characters is not masked: it would hit words


async def test_the_log_masks_credentials_the_builder_took_from_the_environment(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, echo_api: str
) -> None:
    """``dynagent serve`` hands its log mask to the app: what a build learns is masked."""

    async def careless(arguments: dict[str, Any]) -> str:
        logger.info("upstream wanted {} and {}", TOOL_TOKEN, MODEL_KEY)
        return "done"

    tools = ToolRegistry.default()
    tools.register(Tool.of(ToolDefinition("careless", "Logs too much.", NO_ARGUMENTS), careless))
    http = {
        "type": "http",
        "name": "orders",
        "url": f"{echo_api}/orders",
        "headers": {"X-Token": "${ORDERS_TOKEN}"},
        "allow_hosts": ["127.0.0.1"],
    }
    model = {"api_key": "${OPENAI_API_KEY}"}
    document = agent_document("bot", model_server, model=model, tools=["careless", http])
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    model_server.script("gpt-main", [CallTools([("careless", {})]), Reply("ok")])
    config = service_config(agents_dir, state_dir, environment={"allow": ["OPENAI_*", "ORDERS_*"]})
    mask = configure_logging("DEBUG")
    lines: list[str] = []
    logger.add(lambda m: lines.append(str(m)), level="DEBUG", format="{message}")
    try:
        async with (
            running_service(config, environ=ENVIRON, tools=tools, secrets=mask) as service,
            service.client.post(
                "/v1/agents/bot/invoke",
                json={"input": "hi"},
                headers={"Authorization": f"Bearer {ADMIN}"},
            ) as response,
        ):
            assert response.status == 200
    finally:
        logger.remove()
        logger.configure(patcher=lambda record: None, extra={})
        logger.add(sys.stderr)
    assert f"upstream wanted {MASK} and {MASK}\n" in lines
    assert [line for line in lines for secret in SECRETS if secret in line] == []


@pytest.mark.parametrize(
    "path, masked",
    [
        ("tools.2.headers.Authorization", True),  # an MCP server's headers, say
        ("model.fallback.api_key", True),
        ("tools.0.url", False),
        ("model.name", False),
    ],
)
def test_the_one_expansion_knows_credentials_by_their_field(path: str, masked: bool) -> None:
    builder = AgentBuilder(environ={"OPENAI_ORG": "org-0123456789"})
    assert builder.expand_env("x ${OPENAI_ORG}", path) == "x org-0123456789"
    assert ("org-0123456789" in builder.secrets) is masked


def test_credentials_inside_any_url_field_are_masked() -> None:
    builder = AgentBuilder(
        environ={"OPENAI_URL": "https://u:pass-0123456789@h/v1?key=qkey-0123456"}
    )
    builder.expand_env("${OPENAI_URL}", "tools.1.url")
    assert ("pass-0123456789" in builder.secrets, "qkey-0123456" in builder.secrets) == (True, True)


@pytest.mark.parametrize("route", ["invoke", "chat"])
async def test_a_secret_split_over_streamed_deltas_is_masked_too(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path, route: str
) -> None:
    document = agent_document("bot", model_server, model={"api_key": "${OPENAI_API_KEY}"})
    (agents_dir / "bot.yaml").write_text(json.dumps(document), encoding="utf-8")
    text = f"the key is {MODEL_KEY} ok"
    pieces = ["the key is sk-mo", "del-key-0123", "456789abcdef", " ok", ""]
    assert "".join(pieces) == text
    model_server.script("gpt-main", [Reply(text, pieces=pieces)])
    config = service_config(agents_dir, state_dir)
    path, body = (
        ("/v1/agents/bot/invoke", {"input": "hi", "stream": True})
        if route == "invoke"
        else ("/v1/chat/completions", {"model": "bot", "stream": True, "messages": [user("hi")]})
    )
    async with running_service(config, environ=ENVIRON) as service:
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with service.client.post(path, json=body, headers=headers) as response:
            assert response.status == 200
            stream = await response.text()

    if route == "invoke":
        deltas = [data["text"] for name, data in parse_sse(stream) if name == "model_delta"]
    else:
        chunks = [data for _, data in parse_sse(stream) if data != "[DONE]"]
        deltas = [c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]]
    assert "".join(deltas) == f"the key is {MASK} ok"
    assert not any(part in stream for part in ("sk-mo", "del-key-0123", "456789abcdef"))


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_a_stream_mask_catches_a_secret_however_the_text_is_cut() -> None:
    secrets = SecretValues(["sk-abcdef-123", "sk-abXYZW"])
    text = "key sk-abcdef-123 and sk-abXYZW, not sk-abc or sk-ab."
    expected = f"key {MASK} and {MASK}, not sk-abc or sk-ab."
    for first in range(len(text) + 1):
        for second in range(first, len(text) + 1):
            stream = StreamMask(secrets)
            pieces = [text[:first], text[first:second], text[second:]]
            out = [stream.feed(piece) for piece in pieces] + [stream.flush()]
            assert "".join(out) == expected, pieces
            assert not any("sk-abcdef-1" in part or "sk-abXYZ" in part for part in out)
