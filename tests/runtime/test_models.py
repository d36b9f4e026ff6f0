"""Model access: retries on 429/5xx, errors carrying the status, fallback, offline TestModel."""

from __future__ import annotations

import jsonschema
import pytest

from dynagent import AgentBuilder, ModelError, OutputValidationError, load_spec
from dynagent.models import ClientPool, FallbackModel, OpenAIModel, TestModel
from tests.support import (
    AgentFactory,
    Fail,
    Malformed,
    Reply,
    ScriptedModelServer,
    Slow,
    event_types,
)

RETRY_NOW = {"retry-after": "0"}


@pytest.mark.parametrize(
    "failure",
    [
        Fail(408, headers=RETRY_NOW),
        Fail(409, headers=RETRY_NOW),
        Fail(429, headers=RETRY_NOW),
        Fail(500, headers=RETRY_NOW),
        Fail(503, headers={"retry-after-ms": "0"}),
    ],
    ids=["408", "409", "429", "500", "503"],
)
async def test_a_retryable_failure_then_success(
    make_agent: AgentFactory, model_server: ScriptedModelServer, failure: Fail
) -> None:
    model_server.script("gpt-main", [failure, Reply("fine")])
    agent = make_agent(model={"retries": 1})

    result = await agent.run("hi")

    assert result.output == "fine"
    assert result.steps == 1
    first, second = model_server.requests
    assert first == second  # the very same request, sent again
    assert event_types(result.events) == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]


async def test_exhausted_retries_raise_model_error_with_the_status(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(503, headers=RETRY_NOW)] * 3)
    agent = make_agent(model={"retries": 2})

    with pytest.raises(ModelError) as caught:
        await agent.run("hi")

    error = caught.value
    assert (error.status, error.retryable, error.kind) == (503, True, "model_error")
    assert error.message == (
        "the model endpoint answered 503: Error code: 503 - scripted failure 503"
    )
    assert event_types(error.events) == ["run_started", "model_request", "error", "run_finished"]
    assert len(model_server.requests) == 3


async def test_a_client_error_is_not_retried(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    body = {"error": {"message": "model not found", "type": "invalid_request_error"}}
    model_server.script("gpt-main", [Fail(404, body=body)])
    agent = make_agent(model={"retries": 3})

    with pytest.raises(ModelError) as caught:
        await agent.run("hi")

    assert (caught.value.status, caught.value.retryable) == (404, False)
    assert caught.value.message == (
        "the model endpoint answered 404: Error code: 404 - model not found "
        "(check model.name and model.base_url)"
    )
    assert len(model_server.requests) == 1


async def test_the_fallback_model_answers_when_the_primary_fails(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(500, headers=RETRY_NOW)] * 2)
    model_server.script("gpt-fallback", [Reply("from the fallback")])
    fallback = {
        "provider": "openai",
        "base_url": model_server.base_url,
        "api_key": "test",
        "name": "gpt-fallback",
    }
    agent = make_agent(model={"retries": 1, "fallback": fallback})

    result = await agent.run("hi")

    assert isinstance(agent.model, FallbackModel)
    assert result.output == "from the fallback"
    assert [body["model"] for body in model_server.requests] == [
        "gpt-main",
        "gpt-main",
        "gpt-fallback",
    ]
    assert model_server.requests[2]["messages"] == model_server.requests[0]["messages"]
    [response] = [e for e in result.events if e.type == "model_response"]
    assert response.model == "gpt-fallback"


async def test_a_failing_fallback_raises_its_own_error(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(500, headers=RETRY_NOW)])
    model_server.script("gpt-fallback", [Fail(502, headers=RETRY_NOW)])
    fallback = {
        "provider": "openai",
        "base_url": model_server.base_url,
        "name": "gpt-fallback",
        "retries": 0,
    }
    agent = make_agent(model={"retries": 0, "fallback": fallback})

    with pytest.raises(ModelError) as caught:
        await agent.run("hi")

    assert caught.value.status == 502


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (Malformed("{not json"), "malformed response from the model endpoint"),
        (Malformed('{"object": "chat.completion"}'), "the model endpoint answered without choices"),
        (Malformed("plain words", content_type="text/plain"), "not a chat completion"),
    ],
    ids=["broken-json", "no-choices", "not-json"],
)
async def test_a_malformed_answer_is_a_model_error(
    make_agent: AgentFactory, model_server: ScriptedModelServer, answer: Malformed, message: str
) -> None:
    model_server.script("gpt-main", [answer])
    agent = make_agent(model={"retries": 2})

    with pytest.raises(ModelError, match=message):
        await agent.run("hi")

    assert len(model_server.requests) == 1  # not retried: the endpoint would answer the same


async def test_a_model_call_past_model_timeout_is_a_retryable_model_error(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Slow(30, Reply("late"))])
    agent = make_agent(model={"retries": 0, "timeout": 0.2})

    with pytest.raises(ModelError) as caught:
        await agent.run("hi")

    error = caught.value
    assert (error.message, error.retryable, error.kind) == (
        "the model endpoint did not answer within model.timeout = 0.2 s",
        True,
        "timeout",
    )


async def test_model_settings_reach_the_endpoint(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("ok")])
    settings = {"temperature": 0.1, "max_tokens": 50, "seed": 7, "stop": ["END"]}
    agent = make_agent(model={"settings": settings})

    await agent.run("hi")

    sent = model_server.requests[0]
    assert {key: sent[key] for key in settings} == settings
    assert set(sent) == {"model", "messages", *settings}


def test_agents_on_one_endpoint_share_one_client() -> None:
    pool = ClientPool()
    first = pool.get("http://127.0.0.1:1/v1", "k")

    assert pool.get("http://127.0.0.1:1/v1", "k") is first
    assert pool.get("http://127.0.0.1:1/v1", "other") is not first
    assert pool.get("http://127.0.0.2:1/v1", "k") is not first


async def test_the_offline_test_model_calls_tools_then_answers_to_the_schema() -> None:
    schema = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "minLength": 3},
            "priority": {"enum": ["low", "high"]},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "score": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["title", "priority", "tags", "score"],
    }
    spec = load_spec(
        {
            "name": "offline",
            "model": {"provider": "test"},
            "prompt": {"system": "x"},
            "tools": ["calculator", "current_time"],
            "output": {"schema": schema},
        }
    )
    agent = AgentBuilder(environ={}).build(spec)

    result = await agent.run("plan it")

    assert isinstance(agent.model, TestModel)
    jsonschema.validate(result.output, schema)
    outcomes = [(e.name, e.is_error) for e in result.events if e.type == "tool_result"]
    assert outcomes == [("calculator", False), ("current_time", False)]


async def test_the_offline_test_model_answers_schemas_with_boolean_subschemas() -> None:
    # Found by the config fuzzer: `true`/`false` are schemas too (JSON Schema 2020-12).
    schema = {
        "type": "object",
        "properties": {"anything": True, "items": {"type": "array", "items": True}},
        "required": ["anything", "items"],
    }
    spec = load_spec(
        {
            "name": "offline",
            "model": {"provider": "test"},
            "prompt": {"system": "x"},
            "output": {"schema": schema},
        }
    )

    result = await AgentBuilder(environ={}).build(spec).run("go")

    jsonschema.validate(result.output, schema)
    assert result.output == {"anything": "example", "items": ["example"]}


async def test_the_offline_test_model_does_not_build_huge_answers() -> None:
    schema = {"type": "array", "items": {"type": "string", "minLength": 10**9}, "minItems": 10**9}
    spec = load_spec(
        {
            "name": "offline",
            "model": {"provider": "test"},
            "prompt": {"system": "x"},
            "output": {"schema": schema, "retries": 0},
        }
    )

    with pytest.raises(OutputValidationError) as refused:
        await AgentBuilder(environ={}).build(spec).run("go")

    assert "is too short" in refused.value.message


def test_provider_auto_picks_openai_only_when_the_environment_names_an_endpoint() -> None:
    spec = load_spec({"name": "auto", "prompt": {"system": "x"}})

    offline = AgentBuilder(environ={}).build(spec)
    online = AgentBuilder(environ={"OPENAI_API_KEY": "sk-test"}).build(spec)

    assert isinstance(offline.model, TestModel)
    assert isinstance(online.model, OpenAIModel)
    assert str(online.model.client.base_url) == "https://api.openai.com/v1/"
