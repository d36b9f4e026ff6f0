"""Every failure answers JSON ``{"error": {"type", "message"}}`` with a fitting status."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse

from dynagent.exceptions import (
    CircuitOpen,
    CostLimitExceeded,
    DynagentError,
    LimitExceeded,
    MaxStepsExceeded,
    ModelError,
    ModelTimeout,
    RunFailed,
    RunTimeout,
    ServiceStopping,
    SessionStoreUnavailable,
    TooManyStreams,
)
from dynagent.http.middleware.errors import from_error
from dynagent.nacos.client import NacosUnavailable
from dynagent.registry.table import AgentUnavailable
from tests.support import CallTools, Fail, Reply, ScriptedModelServer, Slow
from tests.support.service import (
    RunningService,
    agent_document,
    parse_sse,
    running_service,
    service_config,
    write_agent,
)

MAX_BODY = 16_384


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    """One agent per way a run can fail, each on its own scripted model."""
    documents = [
        agent_document("offline"),
        agent_document(
            "strict",
            model_server,
            model={"name": "m-strict"},
            output={"schema": {"type": "object", "required": ["ok"]}, "retries": 1},
        ),
        agent_document(
            "looping",
            model_server,
            model={"name": "m-looping"},
            tools=["calculator"],
            limits={"max_steps": 1},
        ),
        agent_document("flaky", model_server, model={"name": "m-flaky", "retries": 1}),
        agent_document(
            "sluggish", model_server, model={"name": "m-sluggish"}, limits={"timeout": 0.3}
        ),
    ]
    for document in documents:
        write_agent(agents_dir, document)
    config = service_config(agents_dir, state_dir, listen={"max_body_bytes": MAX_BODY})
    async with running_service(config) as running:
        yield running


async def error_of(response: ClientResponse) -> tuple[int, dict[str, Any]]:
    """Status and error body; fails unless the answer is the JSON error shape."""
    text = await response.text()
    assert response.content_type == "application/json", text
    assert "Traceback" not in text
    body = json.loads(text)
    assert set(body) == {"error"}
    assert {"type", "message"} <= set(body["error"])
    assert all(isinstance(value, str) for value in body["error"].values())
    return response.status, body["error"]


JSON = {"Content-Type": "application/json"}
DEEP = {"input": "x", "variables": json.loads("[" * 100 + "]" * 100)}
BAD_BODIES = {
    "not JSON": (b"{not json", "the body is not valid JSON: "),
    "not UTF-8": (b'{"input": "\xff\xfe"}', "the body is not valid UTF-8"),
    "not an object": (b'["hi"]', "the body must be a JSON object"),
    "input of the wrong type": (b'{"input": 5}', "invalid request body: input"),
    "empty input": (b'{"input": ""}', "invalid request body: input"),
    "variables of the wrong type": (
        b'{"input": "x", "variables": {"a": 1}}',
        "invalid request body: variables.a: Input should be a valid string",
    ),
    "unknown field": (
        b'{"input": "x", "inptu": "y"}',
        "invalid request body: inptu: Extra inputs are not permitted",
    ),
    "nested too deep": (json.dumps(DEEP).encode(), "the body nests deeper than 64 levels"),
    "a number too long to read": (
        b'{"input": "x", "session_id": ' + b"9" * 5000 + b"}",
        "the body holds a number of more than 4300 digits",
    ),
    "nested deeper than the parser goes": (
        b'{"input": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "the body nests deeper than 64 levels",
    ),
}


CHAT_BAD_BODIES = {
    "not JSON": (b"{not json", "the body is not valid JSON: ", None),
    "not UTF-8": (b'{"model": "\xff"}', "the body is not valid UTF-8", None),
    "no model": (
        b'{"messages": [{"role": "user", "content": "x"}]}',
        "invalid request body: model",
        "model",
    ),
    "no messages": (
        b'{"model": "offline", "messages": []}',
        "invalid request body: messages",
        "messages",
    ),
    "unknown role": (
        b'{"model": "offline", "messages": [{"role": "robot", "content": "x"}]}',
        "invalid request body: messages.0.role",
        "messages.0.role",
    ),
    "nested too deep": (
        json.dumps({"model": "offline", "messages": DEEP["variables"]}).encode(),
        "the body nests deeper than 64 levels",
        None,
    ),
}


@pytest.mark.parametrize(
    "path,raw,message",
    [("/v1/agents/offline/invoke", *case) for case in BAD_BODIES.values()],
    ids=[f"invoke, {case}" for case in BAD_BODIES],
)
async def test_a_bad_body_is_400(
    service: RunningService, path: str, raw: bytes, message: str
) -> None:
    response = await service.client.post(path, data=raw, headers=JSON)
    status, error = await error_of(response)
    assert (status, error["type"]) == (400, "bad_request")
    assert error["message"].startswith(message), error["message"]


@pytest.mark.parametrize(
    "raw,message,param",
    [(raw, message, param) for raw, message, param in CHAT_BAD_BODIES.values()],
    ids=list(CHAT_BAD_BODIES),
)
async def test_a_bad_chat_body_is_400_in_openais_shape(
    service: RunningService, raw: bytes, message: str, param: str | None
) -> None:
    response = await service.client.post("/v1/chat/completions", data=raw, headers=JSON)
    body = await response.json()
    assert body["error"]["message"].startswith(message), body
    assert (response.status, body) == (
        400,
        {
            "error": {
                "message": body["error"]["message"],
                "type": "invalid_request_error",
                "param": param,
                "code": None,
            }
        },
    )


async def test_the_body_must_be_json_content(service: RunningService) -> None:
    response = await service.client.post(
        "/v1/agents/offline/invoke", data='{"input": "x"}', headers={"Content-Type": "text/plain"}
    )
    assert await error_of(response) == (
        415,
        {"type": "unsupported_media_type", "message": "send the body as application/json"},
    )


async def test_a_body_over_the_limit_is_413(service: RunningService) -> None:
    body = {"input": "x" * (MAX_BODY + 1)}
    response = await service.client.post("/v1/agents/offline/invoke", json=body)
    assert await error_of(response) == (
        413,
        {
            "type": "too_large",
            "message": f"Maximum request body size {MAX_BODY} exceeded. "
            "Send a smaller body (listen.max_body_bytes).",
        },
    )


@pytest.mark.parametrize(
    "method,path,expected",
    [
        ("GET", "/v1/agents/nobody", "no agent named 'nobody'"),
        ("POST", "/v1/agents/nobody/invoke", "no agent named 'nobody'"),
        ("GET", "/v1/traces/0123456789abcdef", "no recent trace '0123456789abcdef'"),
        (
            "GET",
            "/v2/nothing/here",
            "Not Found: this service has no GET /v2/nothing/here; "
            "GET /openapi.json lists its routes",
        ),
    ],
)
async def test_unknown_things_are_404(
    service: RunningService, method: str, path: str, expected: str
) -> None:
    response = await service.client.request(method, path, json={"input": "x"})
    status, error = await error_of(response)
    assert (status, error["type"]) == (404, "not_found")
    assert error["message"].startswith(expected)


async def test_a_wrong_method_is_405(service: RunningService) -> None:
    response = await service.client.get("/v1/agents/offline/invoke")
    assert await error_of(response) == (
        405,
        {
            "type": "method_not_allowed",
            "message": "Method Not Allowed: /v1/agents/offline/invoke takes POST, not GET",
        },
    )
    assert response.headers["Allow"] == "POST"


async def test_a_missing_routes_error_quotes_a_bounded_part_of_its_path(
    service: RunningService,
) -> None:
    path = "/v2/" + "x" * 5_000
    status, error = await error_of(await service.client.post(path, json={}))
    assert (status, error["type"]) == (404, "not_found")
    assert f"POST /v2/{'x' * 196}…;" in error["message"]
    assert len(error["message"]) < 320


async def run_error(
    service: RunningService, name: str, *, final: bool
) -> tuple[int, dict[str, Any]]:
    """The status and error of a failed run of ``name``; ``final``: whether it says a
    retry would fail alike (``X-Should-Retry: false``, which stops the OpenAI clients'
    own retries) or says nothing (they may retry)."""
    response = await service.client.post(f"/v1/agents/{name}/invoke", json={"input": "go"})
    assert response.headers.get("X-Should-Retry") == ("false" if final else None)
    status, error = await error_of(response)
    assert error.keys() == {"type", "message", "trace_id"}
    trace = await (await service.client.get(f"/v1/traces/{error['trace_id']}")).json()
    assert [e["type"] for e in trace["events"]][-2:] == ["error", "run_finished"]
    assert trace["events"][-2]["error_type"] == error["type"]
    # A failed run still names what served it, like a successful one.
    served = {k: response.headers.get(k) for k in ("X-Agent-Revision", "X-Agent-Variant")}
    assert served == {"X-Agent-Revision": trace["revision"], "X-Agent-Variant": "stable"}
    assert response.headers.get("X-Trace-Id") == error["trace_id"]
    return status, error


async def test_an_answer_failing_its_schema_after_retries_is_422(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("m-strict", [Reply("not JSON"), Reply('{"nope": 1}')])
    status, error = await run_error(service, "strict", final=False)  # 422: not retried anyway
    assert (status, error["type"], error["message"]) == (
        422,
        "output_invalid",
        "the final answer does not match the output schema: at (root): 'ok' is a required property",
    )


async def test_hitting_a_limit_is_429(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("m-looping", [CallTools([("calculator", {"expression": "1+1"})])])
    status, error = await run_error(service, "looping", final=True)
    assert (status, error["type"], error["message"]) == (
        429,
        "limit_exceeded",
        "no final answer within limits.max_steps = 1",
    )


async def test_a_model_failing_after_its_retries_is_502(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    quick = {"retry-after-ms": "1"}
    model_server.script("m-flaky", [Fail(500, headers=quick), Fail(500, headers=quick)])
    status, error = await run_error(service, "flaky", final=False)
    assert (status, error["type"]) == (502, "model_error")
    assert error["message"].startswith("the model endpoint answered 500"), error["message"]
    assert len(model_server.requests_for("m-flaky")) == 2


@pytest.mark.parametrize(
    ("status", "final"), [(400, True), (401, True), (404, True), (422, True), (408, False)]
)
async def test_a_request_the_model_endpoint_refuses_is_502_and_final(
    service: RunningService, model_server: ScriptedModelServer, status: int, final: bool
) -> None:
    """The endpoint's own refusal is not retried by the model client, and the answer says a
    retry would fail alike; its request timeout (408) is retried, as a 5xx is."""
    quick = {"retry-after-ms": "1"}
    model_server.script("m-flaky", [Fail(status, headers=quick)] * (1 if final else 2))
    answered, error = await run_error(service, "flaky", final=final)
    assert (answered, error["type"]) == (502, "model_error")
    assert error["message"].startswith(f"the model endpoint answered {status}"), error["message"]
    assert len(model_server.requests_for("m-flaky")) == (1 if final else 2)


@pytest.mark.parametrize(
    ("error", "final"),
    [
        (MaxStepsExceeded("no final answer within limits.max_steps = 1"), True),
        (LimitExceeded("tool_call_limit: 3 calls"), True),
        (CostLimitExceeded("spent $0.2 of $0.1", spent=0.2, limit=0.1), True),
        (ModelError("the model endpoint answered 400: no", status=400), True),
        (ModelError("malformed answer from the model endpoint: no choices"), True),
        (ModelError("the model endpoint answered 503: busy", status=503, retryable=True), False),
        (ModelTimeout("the model endpoint did not answer", retryable=True), False),
        (CircuitOpen("http://model", 5.0, 3, "503"), False),
        (RunTimeout("run took longer than limits.timeout = 1 s"), False),
        (SessionStoreUnavailable("the session store is out"), False),
        (RunFailed("limit_exceeded", "no final answer within limits.max_steps = 1"), True),
        (RunFailed("model_error", "the model stream broke"), False),
        (TooManyStreams("past listen.max_watch_streams_per_key"), False),
    ],
)
@pytest.mark.parametrize("openai", [False, True])
def test_only_an_error_a_retry_would_repeat_says_not_to_retry(
    error: DynagentError, final: bool, openai: bool
) -> None:
    response = from_error(error, openai=openai)
    assert response.headers.get("X-Should-Retry") == ("false" if final else None)


async def test_a_run_over_its_time_is_504(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("m-sluggish", [Slow(30, Reply("too late"))])
    status, error = await run_error(service, "sluggish", final=False)
    assert (status, error["type"], error["message"]) == (
        504,
        "timeout",
        "run took longer than limits.timeout = 0.3 s",
    )


async def test_a_streamed_run_that_fails_ends_with_an_error_event(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    model_server.script("m-flaky", [Fail(400)])
    response = await service.client.post(
        "/v1/agents/flaky/invoke", json={"input": "go", "stream": True}
    )
    text = await response.text()
    assert response.status == 200  # the stream had started; the error is its last events
    names = [line.removeprefix("event: ") for line in text.splitlines() if line.startswith("ev")]
    assert names == ["run_started", "model_request", "error", "run_finished"]
    assert "Traceback" not in text
    (error,) = [data for name, data in parse_sse(text) if name == "error"]
    assert error["retryable"] is False  # the endpoint refused the request itself


@pytest.mark.parametrize(("status", "final"), [(400, True), (422, True), (500, False)])
async def test_a_held_stream_the_model_endpoint_refuses_says_whether_to_retry(
    service: RunningService, model_server: ScriptedModelServer, status: int, final: bool
) -> None:
    """A streamed chat completion fails before its first chunk as a whole one does: 502,
    and ``X-Should-Retry: false`` when the endpoint refused the request itself."""
    quick = {"retry-after-ms": "1"}
    model_server.script("m-flaky", [Fail(status, headers=quick)] * (1 if final else 2))
    body = {"model": "flaky", "messages": [{"role": "user", "content": "go"}], "stream": True}
    response = await service.client.post("/v1/chat/completions", json=body)
    assert response.status == 502
    assert response.headers.get("X-Should-Retry") == ("false" if final else None)
    error = (await response.json())["error"]
    assert error["message"].startswith(f"the model endpoint answered {status}"), error
    assert len(model_server.requests_for("m-flaky")) == (1 if final else 2)


@pytest.mark.parametrize(
    "error",
    [
        SessionStoreUnavailable("reading the session failed: the session store is unavailable"),
        NacosUnavailable("publishing AGENTS/bot.canary.yaml failed: no answer"),
        AgentUnavailable("agent 'bot' has no valid version"),
        ServiceStopping("the service is stopping"),
    ],
    ids=lambda error: type(error).__name__,
)
@pytest.mark.parametrize("openai", [False, True], ids=["ours", "openai"])
def test_every_outage_is_a_503_unavailable_with_retry_after(
    error: DynagentError, openai: bool
) -> None:
    response = from_error(error, openai=openai)
    assert response.text is not None
    body = json.loads(response.text)["error"]
    kind = body["code"] if openai else body["type"]
    retry = response.headers.get("Retry-After")
    assert (response.status, kind, retry is not None and int(retry) >= 1) == (
        503,
        "unavailable",
        True,
    )
