"""What every request passes before and after its route, in one middleware: a CORS
preflight answered first, then the caller authenticated unless the path or route is
public (their 404 and 405 too), errors made JSON in our shape or OpenAI's, and known
secrets masked in every whole answer, errors included."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynagent.http.state import SERVICE
from tests.support import ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

KEY = "front-test-key-aaaaaaaaaaaaaaaa"
APP = "https://app.example.com"


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(params=[False, True], ids=["no-origins", "an-origin"])
async def service(
    request: pytest.FixtureRequest,
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, agent_document("bot", model_server))
    origins = [APP] if request.param else []
    config = service_config(agents_dir, state_dir, cors={"allow_origins": origins})
    async with running_service(config, environ={"DYNAGENT_API_KEYS": KEY}) as running:
        yield running


async def test_requests_pass_one_middleware_and_no_cors_hook_without_origins(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server))
    async with running_service(service_config(agents_dir, state_dir)) as running:
        assert len(running.app.middlewares) == 1
        # Only the stopping service's ``Connection: close``: nothing asks for an Origin.
        assert len(running.app.on_response_prepare) == 1


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/healthz", 200),
        ("POST", "/healthz", 405),  # a public path's wrong method: no key asked
        ("GET", "/openapi.json", 200),
        ("GET", "/ui/", 200),
        ("GET", "/metrics", 401),
        ("GET", "/nowhere", 401),  # an unknown path asks for a key before saying 404
        ("POST", "/v1/chat/completions", 401),
        ("GET", "/v1/agents", 401),
    ],
)
async def test_which_requests_need_a_key(
    service: RunningService, method: str, path: str, status: int
) -> None:
    response = await service.client.request(method, path)
    assert response.status == status
    if status >= 400:
        assert response.content_type == "application/json"
        assert "error" in await response.json()


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/chat/completions", {"message", "type", "param", "code"}),
        ("/v1/agents/bot/invoke", None),
    ],
)
async def test_errors_are_json_in_the_routes_own_shape(
    service: RunningService, path: str, shape: set[str] | None
) -> None:
    unauthorized = await service.client.post(path, json={})
    assert unauthorized.status == 401
    assert unauthorized.headers["WWW-Authenticate"] == "Bearer"
    error = (await unauthorized.json())["error"]
    assert set(error) == (shape or {"type", "message"})
    headers = {**auth(), "Content-Type": "application/json"}
    not_json = await service.client.post(path, data=b"{", headers=headers)
    assert not_json.status == 400
    assert set((await not_json.json())["error"]) == (shape or {"type", "message"})


async def test_a_secret_in_an_error_is_masked(service: RunningService) -> None:
    response = await service.client.post(
        f"/v1/agents/{KEY}/invoke", json={"input": "hi"}, headers=auth()
    )
    text = await response.text()
    assert response.status == 404
    assert KEY not in text
    assert "***" in text


async def test_a_preflight_is_answered_before_authentication(service: RunningService) -> None:
    headers = {"Origin": APP, "Access-Control-Request-Method": "POST"}
    response = await service.client.options("/v1/agents/bot/invoke", headers=headers)
    configured = bool(service.app[SERVICE].config.cors.allow_origins)
    assert response.status == (204 if configured else 403)
    plain = await service.client.get("/healthz", headers={"Origin": APP})
    assert ("Access-Control-Allow-Origin" in plain.headers) is configured
