"""Structured output the way OpenAI clients ask for it, on an agent with its own output
schema (``triage``): ``parse()``, LangChain's ``with_structured_output`` (JSON schema and
JSON mode), pydantic-ai's ``NativeOutput`` and ``PromptedOutput`` and the Agents SDK's
``output_type``, each unchanged. Every one of them was refused with 400 ("has its own output
schema"), ``json_object`` too. The caller's schema is validated (and retried) together with
the agent's; only a schema that cannot hold together with it is refused, saying why."""

from __future__ import annotations

from typing import Any, Literal

import openai
import pytest
from agents import Agent as SdkAgent
from agents import OpenAIChatCompletionsModel, RunConfig, Runner
from langchain_openai import ChatOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput, PromptedOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from tests.openai.conftest import API_KEY, TRIAGE_SCHEMA, Served
from tests.support import Reply

USER: Any = [{"role": "user", "content": "My invoice is wrong."}]
BILLING = '{"category": "billing"}'


class Triage(BaseModel):
    category: Literal["billing", "other"]


class Loose(BaseModel):
    category: str


def sync_client(service: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0)


def async_client(service: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=service.v1, api_key=API_KEY, max_retries=0)


def sent_schema(request: dict[str, Any]) -> Any:
    return request["response_format"]["json_schema"]["schema"]


@pytest.mark.parametrize("model", [Triage, Loose], ids=["same-shape", "looser"])
def test_parse_on_an_agent_with_its_own_schema(service: Served, model: type[BaseModel]) -> None:
    service.script([Reply(BILLING)])
    completion = sync_client(service).chat.completions.parse(
        model="triage", messages=USER, response_format=model
    )
    assert completion.choices[0].message.parsed == model(category="billing")
    (request,) = service.requests()
    mine, theirs = sent_schema(request)["allOf"]
    assert (mine, theirs["required"]) == (TRIAGE_SCHEMA, ["category"])


def test_json_object_is_the_agents_own_json(service: Served) -> None:
    service.script([Reply(BILLING)])
    completion = sync_client(service).chat.completions.create(
        model="triage", messages=USER, response_format={"type": "json_object"}
    )
    assert completion.choices[0].message.content == BILLING
    (request,) = service.requests()
    assert sent_schema(request) == TRIAGE_SCHEMA


def test_the_callers_schema_is_validated_and_retried_with_the_agents(service: Served) -> None:
    class OnlyBilling(BaseModel):
        category: Literal["billing"]

    # "other" fits the agent's schema, not the caller's: sent back to the model to fix.
    service.script([Reply('{"category": "other"}'), Reply(BILLING)])
    completion = sync_client(service).chat.completions.parse(
        model="triage", messages=USER, response_format=OnlyBilling
    )
    assert completion.choices[0].message.parsed == OnlyBilling(category="billing")
    second = service.requests()[1]
    assert "does not match the required output schema" in second["messages"][-1]["content"]


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
def test_langchain_with_structured_output(service: Served, method: str) -> None:
    service.script([Reply(BILLING)])
    chat = ChatOpenAI(model="triage", base_url=service.v1, api_key=API_KEY, max_retries=0)
    structured: Any = chat.with_structured_output(Triage, method=method)
    assert structured.invoke("My invoice is wrong.") == Triage(category="billing")


@pytest.mark.parametrize("kind", [NativeOutput, PromptedOutput])
async def test_pydantic_ai_native_and_prompted_output(service: Served, kind: Any) -> None:
    service.script([Reply(BILLING)])
    model = OpenAIChatModel("triage", provider=OpenAIProvider(openai_client=async_client(service)))
    result = await Agent(model, output_type=kind(Triage)).run("My invoice is wrong.")
    assert result.output == Triage(category="billing")


async def test_openai_agents_output_type(service: Served) -> None:
    service.script([Reply(BILLING)])
    model = OpenAIChatCompletionsModel(model="triage", openai_client=async_client(service))
    agent = SdkAgent(name="caller", instructions="Triage.", model=model, output_type=Triage)
    result = await Runner.run(
        agent, "My invoice is wrong.", run_config=RunConfig(tracing_disabled=True)
    )
    assert result.final_output == Triage(category="billing")


class Numbered(BaseModel):
    category: int


class WithUrgency(BaseModel):
    category: str
    urgent: bool


REFUSED = {
    "another type": (
        Numbered,
        "at /category the agent answers string; the request asks for integer",
    ),
    "a property the agent never answers": (
        WithUrgency,
        "the request requires /urgent, which the agent's schema does not allow "
        "(additionalProperties: false)",
    ),
}


@pytest.mark.parametrize(("model", "why"), REFUSED.values(), ids=REFUSED.keys())
def test_a_schema_that_cannot_hold_with_the_agents_is_refused_saying_why(
    service: Served, model: type[BaseModel], why: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        sync_client(service).chat.completions.parse(
            model="triage", messages=USER, response_format=model
        )
    assert caught.value.body == {
        "message": "the response format cannot hold together with agent 'triage''s own "
        f"output schema: {why}",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }
