"""API keys: from the environment and from a keys file, limited to agents, open health."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dynagent.config import ServiceConfig
from dynagent.core.auth import ApiKeys
from dynagent.exceptions import ConfigError
from dynagent.http.app import create_app
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

ENV_KEYS = ["env-key-aaaaaaaaaaaaaaaa", "env-key-bbbbbbbbbbbbbbbb"]
FRONTEND = "frontend-key-cccccccccccccccc"
RELEASE = "release-key-dddddddddddddddd"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    keys = [
        {"name": "frontend", "key": FRONTEND, "agents": ["bot"]},
        {"name": "release", "key": RELEASE, "admin": True},
    ]
    path.write_text(yaml.safe_dump({"keys": keys}), encoding="utf-8")
    return path


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, keys_file: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot"))
    write_agent(agents_dir, agent_document("other"))
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys_file)})
    environ = {"DYNAGENT_API_KEYS": ", ".join(ENV_KEYS)}
    async with running_service(config, environ=environ) as running:
        yield running


async def call(
    service: RunningService, method: str, path: str, key: str | None = None
) -> tuple[int, Any]:
    body = {"input": "hi"} if method == "POST" else None
    headers = bearer(key) if key else {}
    async with service.client.request(method, path, json=body, headers=headers) as response:
        data = await response.json() if response.content_type == "application/json" else None
        return response.status, data


@pytest.mark.parametrize("path", ["/healthz", "/readyz", "/openapi.json"])
async def test_health_and_the_api_document_need_no_key(service: RunningService, path: str) -> None:
    assert (await call(service, "GET", path))[0] == 200


@pytest.mark.parametrize(
    "method,path",
    [
        ("GET", "/v1/agents"),
        ("GET", "/v1/agents/bot"),
        ("POST", "/v1/agents/bot/invoke"),
        ("GET", "/v1/traces/abc"),
        ("GET", "/metrics"),
    ],
)
async def test_everything_else_needs_a_key(service: RunningService, method: str, path: str) -> None:
    response = await service.client.request(method, path, json={"input": "hi"})
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert await response.json() == {
        "error": {
            "type": "unauthorized",
            "message": "send an API key as 'Authorization: Bearer <key>'",
        }
    }


@pytest.mark.parametrize(
    "header",
    ["Bearer wrong-key-eeeeeeeeeeeeeeee", "Bearer ", f"Basic {ENV_KEYS[0]}", ENV_KEYS[0]],
)
async def test_a_wrong_key_or_scheme_is_401(service: RunningService, header: str) -> None:
    response = await service.client.get("/v1/agents", headers={"Authorization": header})
    assert response.status == 401
    assert (await response.json())["error"]["type"] == "unauthorized"


@pytest.mark.parametrize("key", [*ENV_KEYS, FRONTEND, RELEASE])
async def test_keys_from_the_environment_and_the_file_are_accepted(
    service: RunningService, key: str
) -> None:
    status, body = await call(service, "POST", "/v1/agents/bot/invoke", key)
    assert (status, body["output"]) == (
        200,
        "[test model] you said: hi | prompt: You are a test agent.",
    )


async def test_a_key_limited_to_some_agents_sees_and_calls_only_those(
    service: RunningService,
) -> None:
    status, listed = await call(service, "GET", "/v1/agents", FRONTEND)
    assert (status, [a["name"] for a in listed["agents"]]) == (200, ["bot"])
    forbidden = {
        "error": {"type": "forbidden", "message": "this API key may not call agent 'other'"}
    }
    assert await call(service, "GET", "/v1/agents/other", FRONTEND) == (403, forbidden)
    assert await call(service, "POST", "/v1/agents/other/invoke", FRONTEND) == (403, forbidden)
    chat = await service.client.post(
        "/v1/chat/completions",
        json={"model": "other", "messages": [{"role": "user", "content": "hi"}]},
        headers=bearer(FRONTEND),
    )
    openai_forbidden = {
        "error": {
            "message": "this API key may not call agent 'other'",
            "type": "invalid_request_error",
            "param": None,
            "code": "permission_denied",
        }
    }
    assert (chat.status, await chat.json()) == (403, openai_forbidden)

    _, run = await call(service, "POST", "/v1/agents/other/invoke", RELEASE)
    trace_id = run["trace_id"]
    assert await call(service, "GET", f"/v1/traces/{trace_id}", FRONTEND) == (
        404,
        {
            "error": {
                "type": "not_found",
                "message": f"no recent trace {trace_id!r} of this API key; "
                "only the last runs are kept",
            }
        },
    )
    _, listed = await call(service, "GET", "/v1/agents", RELEASE)
    assert [a["name"] for a in listed["agents"]] == ["bot", "other"]


async def test_without_keys_auth_is_off(agents_dir: Path, state_dir: Path) -> None:
    write_agent(agents_dir, agent_document("bot"))
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        assert (await call(service, "POST", "/v1/agents/bot/invoke"))[0] == 200


async def test_the_keys_variable_can_be_renamed(agents_dir: Path, state_dir: Path) -> None:
    config = service_config(agents_dir, state_dir, auth={"keys_env": "MY_KEYS"})
    environ = {"MY_KEYS": ENV_KEYS[0], "DYNAGENT_API_KEYS": ENV_KEYS[1]}
    async with running_service(config, environ=environ) as service:
        assert (await call(service, "GET", "/v1/agents", ENV_KEYS[0]))[0] == 200
        assert (await call(service, "GET", "/v1/agents", ENV_KEYS[1]))[0] == 401


def test_every_key_is_compared_in_constant_time(
    keys_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def compare_digest(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return original(a, b)

    monkeypatch.setattr("dynagent.core.auth.hmac.compare_digest", compare_digest)
    keys = ApiKeys.load({"DYNAGENT_API_KEYS": ",".join(ENV_KEYS)}, "DYNAGENT_API_KEYS", keys_file)

    assert keys.authenticate(f"Bearer {ENV_KEYS[0]}").name == "DYNAGENT_API_KEYS[0]"
    # No early exit on a match: the time taken does not tell which key matched.
    assert len(compared) == 4
    assert all(len(a) == len(b) == 32 for a, b in compared)  # digests, never raw keys


BAD_KEYS_FILES = {
    "a short key": ("keys: [{name: a, key: short}]", "invalid keys file (keys.0.key: "),
    "an unknown field": (
        "keys: [{name: a, key: long-enough-key-123456, agent: [x]}]",
        "invalid keys file (keys.0.agent: Extra inputs are not permitted)",
    ),
    "broken YAML": ("keys: [", "keys file is not valid YAML: "),
}


@pytest.mark.parametrize("text,reason", BAD_KEYS_FILES.values(), ids=list(BAD_KEYS_FILES))
def test_a_bad_keys_file_stops_the_start_with_the_field(
    tmp_path: Path, text: str, reason: str
) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(text, encoding="utf-8")
    config = ServiceConfig.model_validate({"auth": {"keys_file": str(path)}})
    with pytest.raises(ConfigError) as caught:
        create_app(config, environ={})
    assert caught.value.source == str(path)
    assert str(caught.value).removeprefix(f"{path}: ").startswith(reason), str(caught.value)


def test_a_missing_keys_file_stops_the_start(tmp_path: Path) -> None:
    config = ServiceConfig.model_validate({"auth": {"keys_file": str(tmp_path / "nope.yaml")}})
    with pytest.raises(ConfigError, match="cannot read the keys file"):
        create_app(config, environ={})
