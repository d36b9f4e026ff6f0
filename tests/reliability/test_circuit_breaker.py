"""The circuit breaker of a model endpoint, on an injected clock: it opens after
``failures`` consecutive failures, sends nothing while open, lets one trial call
through after ``cooldown`` and closes on its success. Agents share it across rebuilds."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dynagent import Resources
from dynagent.exceptions import CircuitOpen, ModelError
from dynagent.models.breaker import BreakerPolicy, CircuitBreaker, endpoint_name
from tests.support import AgentFactory, Fail, Reply, ScriptedModelServer

NO_WAIT = {"retry-after-ms": "0"}
DOWN = Fail(503, headers=NO_WAIT)
LAST = "the model endpoint answered 503: Error code: 503 - scripted failure 503"


class Clock:
    """Monotonic seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def agents(model_server: ScriptedModelServer, clock: Clock) -> AsyncIterator[AgentFactory]:
    factory = AgentFactory(model_server, resources=Resources(clock=clock))
    yield factory
    await factory.aclose()


def breaker_of(**settings: Any) -> dict[str, Any]:
    return {"retries": 0, "circuit_breaker": {"failures": 3, "cooldown": 10, **settings}}


async def model_error(agent: Any) -> ModelError:
    with pytest.raises(ModelError) as caught:
        await agent.run("hi")
    return caught.value


async def test_it_opens_after_n_failures_and_sends_nothing_while_open(
    agents: AgentFactory, model_server: ScriptedModelServer, clock: Clock
) -> None:
    model_server.script("gpt-main", [DOWN] * 3)
    agent = agents(model=breaker_of())

    for _ in range(3):
        assert type(await model_error(agent)) is ModelError
    clock.now += 9.5
    refused = [await model_error(agent) for _ in range(5)]

    assert len(model_server.requests) == 3
    assert {type(error) for error in refused} == {CircuitOpen}
    endpoint = f"gpt-main at {model_server.base_url}"
    assert refused[0].message == (
        f"circuit open for {endpoint}, retry after 0.5s (3 consecutive failures; last: {LAST})"
    )
    assert (refused[0].kind, refused[0].retryable, refused[0].status) == (
        "circuit_open",
        False,
        None,
    )


async def test_retries_count_and_stop_as_soon_as_it_opens(
    agents: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 5)
    agent = agents(model={"retries": 2, "circuit_breaker": {"failures": 5}})

    first, second, third = [await model_error(agent) for _ in range(3)]

    assert [type(first), type(second), type(third)] == [ModelError, CircuitOpen, CircuitOpen]
    assert len(model_server.requests) == 5  # 3 attempts, then 2 before the circuit opened


async def test_it_half_opens_after_the_cooldown_and_closes_on_success(
    agents: AgentFactory, model_server: ScriptedModelServer, clock: Clock
) -> None:
    model_server.script("gpt-main", [DOWN] * 3 + [Reply("back"), DOWN, Reply("still up")])
    agent = agents(model=breaker_of())
    for _ in range(3):
        await model_error(agent)
    assert isinstance(await model_error(agent), CircuitOpen)

    clock.now += 10
    assert (await agent.run("hi")).output == "back"  # the trial call
    assert isinstance(await model_error(agent), ModelError)  # closed: one failure is not enough
    assert (await agent.run("hi")).output == "still up"
    assert len(model_server.requests) == 6


async def test_a_failed_trial_call_opens_it_for_another_cooldown(
    agents: AgentFactory, model_server: ScriptedModelServer, clock: Clock
) -> None:
    model_server.script("gpt-main", [DOWN] * 4)
    agent = agents(model=breaker_of())
    for _ in range(3):
        await model_error(agent)

    clock.now += 10
    trial = await model_error(agent)
    clock.now += 9.9
    refused = await model_error(agent)

    assert type(trial) is ModelError
    assert isinstance(refused, CircuitOpen)
    assert (refused.failures, round(refused.retry_after, 3)) == (4, 0.1)
    assert len(model_server.requests) == 4


async def test_a_rebuilt_agent_keeps_the_open_circuit_of_its_endpoint(
    agents: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 3)
    for _ in range(3):
        await model_error(agents(model=breaker_of()))

    rebuilt = agents(model=breaker_of(), prompt={"system": "A new prompt."})

    assert isinstance(await model_error(rebuilt), CircuitOpen)
    assert len(model_server.requests) == 3


async def test_each_agent_applies_its_own_threshold_to_the_shared_record(
    agents: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 3 + [Reply("patient")])
    strict, patient = agents(model=breaker_of()), agents(model=breaker_of(failures=10))
    for _ in range(3):
        await model_error(strict)

    assert isinstance(await model_error(strict), CircuitOpen)
    assert (await patient.run("hi")).output == "patient"  # and its success closes it for all
    model_server.script("gpt-main", [Reply("strict again")])
    assert (await strict.run("hi")).output == "strict again"


async def test_client_errors_do_not_open_it_and_it_can_be_turned_off(
    agents: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [Fail(400)] * 4 + [DOWN] * 4)
    guarded = agents(model=breaker_of())
    unguarded = agents(model={"retries": 0, "circuit_breaker": {"enabled": False}})

    errors = [await model_error(guarded) for _ in range(4)]
    errors += [await model_error(unguarded) for _ in range(4)]

    assert [error.status for error in errors] == [400] * 4 + [503] * 4
    assert len(model_server.requests) == 8


async def test_the_fallback_answers_at_once_while_the_primary_circuit_is_open(
    agents: AgentFactory, model_server: ScriptedModelServer
) -> None:
    model_server.script("gpt-main", [DOWN] * 3)
    model_server.script("gpt-fallback", [Reply("from the fallback")] * 5)
    fallback = {"provider": "openai", "base_url": model_server.base_url, "name": "gpt-fallback"}
    agent = agents(model={**breaker_of(), "fallback": fallback})

    outputs = [(await agent.run("hi")).output for _ in range(5)]

    assert outputs == ["from the fallback"] * 5
    assert [body["model"] for body in model_server.requests] == [
        *["gpt-main", "gpt-fallback"] * 3,
        *["gpt-fallback"] * 2,
    ]


def test_the_breaker_state_machine(clock: Clock) -> None:
    breaker = CircuitBreaker("m at http://x/v1", clock=clock)
    policy = BreakerPolicy(failures=2, cooldown=5)
    down = ModelError("down", status=503, retryable=True)

    breaker.admit(policy).settle(down)
    assert breaker.state(policy) == "closed"
    breaker.admit(policy).settle(down)
    assert breaker.state(policy) == "open"
    with pytest.raises(CircuitOpen):
        breaker.admit(policy)

    clock.now += 5
    assert breaker.state(policy) == "half_open"
    trial = breaker.admit(policy)
    with pytest.raises(CircuitOpen):  # one trial call at a time
        breaker.admit(policy)
    trial.release()  # abandoned (cancelled): the next caller may try
    breaker.admit(policy).succeeded()
    assert (breaker.state(policy), breaker.failures) == ("closed", 0)


def test_the_endpoint_name_never_shows_credentials() -> None:
    assert endpoint_name("https://user:secret@llm.example.com/v1", "qwen-plus") == (
        "qwen-plus at https://llm.example.com/v1"
    )
