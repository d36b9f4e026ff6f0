"""Output schema: response_format sent, invalid answers sent back to be fixed, retries."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynagent import OutputValidationError
from dynagent.runtime import _loop
from dynagent.runtime import agent as agent_module
from dynagent.runtime.options import RunOptions
from dynagent.spec import _schemas
from tests.support import SYSTEM_PROMPT, AgentFactory, Reply, ScriptedModelServer

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "integer"}},
    "required": ["answer"],
    "additionalProperties": False,
}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA}}


def fix_request(problem: str) -> dict[str, str]:
    return {
        "role": "user",
        "content": f"Your answer does not match the required output schema: {problem}. "
        f"Reply with only a JSON value that validates against this schema: {json.dumps(SCHEMA)}",
    }


async def test_the_output_schema_is_sent_as_response_format(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply('{"answer": 4}')])
    agent = make_agent(output={"schema": SCHEMA})

    result = await agent.run("2 + 2?")

    assert result.output == {"answer": 4}
    assert model_server.requests[0]["response_format"] == RESPONSE_FORMAT
    [final] = [e for e in result.events if e.type == "final_output"]
    assert final.output == {"answer": 4}


async def test_structured_output_off_leaves_response_format_out(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply('```json\n{"answer": 4}\n```')])
    agent = make_agent(output={"schema": SCHEMA}, model={"structured_output": False})

    result = await agent.run("2 + 2?")

    assert result.output == {"answer": 4}  # a fenced answer is accepted
    assert "response_format" not in model_server.requests[0]


async def test_an_invalid_answer_goes_back_with_the_validation_error(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply('{"answer": "four"}'), Reply('{"answer": 4}')])
    agent = make_agent(output={"schema": SCHEMA, "retries": 1})

    result = await agent.run("2 + 2?")

    assert result.output == {"answer": 4}
    assert result.steps == 2
    retry = model_server.requests[1]
    assert retry["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": '{"answer": "four"}'},
        fix_request("at answer: 'four' is not of type 'integer'"),
    ]
    assert retry["response_format"] == RESPONSE_FORMAT


async def test_an_answer_that_is_not_json_is_named_as_such(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("four"), Reply('{"answer": 4}')])
    agent = make_agent(output={"schema": SCHEMA})

    await agent.run("2 + 2?")

    assert model_server.requests[1]["messages"][-1] == fix_request("the answer is not valid JSON")


async def test_exhausting_output_retries_raises_output_validation_error(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply('{"answer": 4.5}'), Reply('{"answer": 4, "extra": 1}')])
    agent = make_agent(output={"schema": SCHEMA, "retries": 1})

    with pytest.raises(OutputValidationError) as caught:
        await agent.run("2 + 2?")

    assert caught.value.message == (
        "the final answer does not match the output schema: at (root): Additional properties "
        "are not allowed ('extra' was unexpected)"
    )
    assert [e.type for e in caught.value.events] == [
        "run_started",
        *["model_request", "model_response"] * 2,
        "error",
        "run_finished",
    ]


async def test_zero_output_retries_fails_on_the_first_invalid_answer(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Reply("[]")])
    agent = make_agent(output={"schema": SCHEMA, "retries": 0})

    with pytest.raises(OutputValidationError, match=r"\[\] is not of type 'object'"):
        await agent.run("2 + 2?")

    assert len(model_server.requests) == 1


async def test_an_agents_own_schema_is_compiled_once_and_a_callers_for_each_run(
    make_agent: AgentFactory, model_server: ScriptedModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[Any] = []
    real = _schemas.validator

    def counted(schema: Any) -> Any:
        built.append(schema)
        return real(schema)

    monkeypatch.setattr(agent_module, "validator", counted)  # the agent's, at build
    monkeypatch.setattr(_loop, "validator", counted)  # a caller's, in the run
    model_server.script("gpt-main", [Reply('{"answer": 4}')] * 3 + [Reply('{"n": 1}')] * 2)
    agent = make_agent(output={"schema": SCHEMA})
    for _ in range(3):
        assert (await agent.run("2 + 2?")).output == {"answer": 4}
    assert built == [SCHEMA]  # the agent's: once, for all its runs

    asked = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    plain = make_agent()
    for _ in range(2):
        assert (await plain.run("n?", options=RunOptions(output_schema=asked))).output == {"n": 1}
    assert built == [SCHEMA, asked, asked]  # a caller's: for each run, never kept
