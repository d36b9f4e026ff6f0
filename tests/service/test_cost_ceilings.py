"""``limits.max_cost_usd`` over the agents a run calls as tools (``type: agent``): their
model calls are money the calling run spent, so they count toward its ceiling as they
happen, at any depth; a called agent whose model has no price is refused under it."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from dynagent.exceptions import CostLimitExceeded
from dynagent.interceptors.base import RunContext
from dynagent.models.prices import Price, Prices
from dynagent.runtime._costs import CEILINGS, CostMeter
from tests.service.test_costs import cost_series, serve
from tests.support import CallTools, Reply, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

PRICES = {
    "m-cheap": {"input": 0.5, "output": 1.0},
    "m-dear": {"input": 1000.0, "output": 1000.0},
}
"""US dollars per million tokens: a call of the dear model costs cents, of the cheap one
a thousandth of a cent."""

ASK_BILLING = [{"type": "agent", "name": "billing", "description": "Ask billing."}]


def billing_and_front(
    server: ScriptedModelServer, billing_model: str, ceiling: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``billing`` on ``billing_model``, and ``front``, which asks it, on the cheap model
    with a ``ceiling`` (``limits.max_cost_usd``)."""
    billing = agent_document("billing", server, model={"name": billing_model})
    front = agent_document(
        "front",
        server,
        model={"name": "m-cheap"},
        tools=ASK_BILLING,
        limits={"max_steps": 5, "max_cost_usd": ceiling},
    )
    return billing, front


async def ask_front(
    service: RunningService, billing: dict[str, Any], front: dict[str, Any]
) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Both served, then ``front`` asked once: the status, the body and the run's trace."""
    await serve(service, billing)
    await serve(service, front)
    response = await service.client.post("/v1/agents/front/invoke", json={"input": "hi"})
    body: dict[str, Any] = await response.json()
    trace_id = body["error"]["trace_id"] if "error" in body else body["trace_id"]
    trace: dict[str, Any] = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
    return response.status, body, trace


async def test_what_a_called_agent_spends_counts_toward_the_callers_ceiling(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # The caller's own call is far under its ceiling; the agent it calls spends past it.
    billing, front = billing_and_front(model_server, "m-dear", 0.001)
    # No step after the tool call: a call past the ceiling would fail as unscripted.
    model_server.script("m-cheap", [CallTools([("billing", {"input": "owed?"})])])
    model_server.script("m-dear", [Reply("You owe 12 EUR.")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        status, body, trace = await ask_front(service, billing, front)
        metrics = await (await service.client.get("/metrics")).text()

    assert status == 429, body
    assert body["error"]["type"] == "cost_limit"
    message = body["error"]["message"]
    assert message.startswith("the run and the agents it called spent $0.0"), message
    assert "of limits.max_cost_usd = $0.001 before another model call" in message
    assert len(model_server.requests_for("m-cheap")) == 1  # no call after the ceiling
    # The called run ended on the caller's ceiling, after the call that went past it.
    [called] = trace["nested"]
    [error] = [e for e in called["events"] if e["type"] == "error"]
    assert error["error_type"] == "cost_limit"
    assert "the run of agent 'front' that called this one" in error["message"]
    # Its spend is still counted on its own agent.
    assert cost_series(metrics)["billing", revision_of(billing), "stable"] > 0.001


async def test_a_called_agent_without_a_price_is_refused_under_a_ceiling(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    billing, front = billing_and_front(model_server, "m-unpriced", 0.5)
    model_server.script("m-cheap", [CallTools([("billing", {"input": "owed?"})]), Reply("ok")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        status, answer, trace = await ask_front(service, billing, front)

    # The caller's model was told why (the tool's error), and answered on.
    assert status == 200, answer
    assert answer["output"] == "ok"
    assert model_server.requests_for("m-unpriced") == []  # no call its ceiling cannot count
    told = model_server.requests_for("m-cheap")[1]["messages"][-1]
    assert told["role"] == "tool"
    assert "model 'm-unpriced' has no price" in told["content"]
    assert "limits.max_cost_usd of agent 'front'" in told["content"]
    [called] = trace["nested"]
    assert [e["error_type"] for e in called["events"] if e["type"] == "error"] == ["cost_limit"]


def _ctx(calls: int) -> RunContext:
    ctx = RunContext("t", "a", "r", {})
    ctx.model_calls = calls
    return ctx


def test_ceilings_hold_through_every_depth_and_end_with_their_block() -> None:
    prices = Prices(MappingProxyType({"m": Price(1.0, 1.0)}))
    outer = CostMeter(prices, "m", 0.5, "outer")
    with outer.calling():
        middle = CostMeter(prices, "m", None, "middle")  # no ceiling of its own
        with middle.calling():
            inner = CostMeter(prices, "m", None, "inner")
            with pytest.raises(CostLimitExceeded) as unpriced:
                CostMeter(prices, "free", None, "free").before_call(_ctx(0))
            first = _ctx(1)
            inner.after_call(first, 0.3)
            with pytest.raises(CostLimitExceeded) as over:
                inner.after_call(_ctx(2), 0.3)
            with pytest.raises(CostLimitExceeded):  # nor does another run start one
                CostMeter(prices, "m", None, "next").before_call(_ctx(0))
        assert CEILINGS.get() == (outer.own,)
    assert CEILINGS.get() == ()
    assert over.value.message == (
        "the run of agent 'outer' that called this one, with the agents it called, spent "
        "$0.600000 of its limits.max_cost_usd = $0.5 after model call 2; raise the limit "
        "or shorten the run"
    )
    assert "model 'free' has no price" in unpriced.value.message
    with pytest.raises(CostLimitExceeded) as own:
        outer.before_call(_ctx(1))
    assert own.value.message.startswith("the run and the agents it called spent $0.600000")
    assert own.value.spent == pytest.approx(0.6)
    assert own.value.limit == 0.5
    # Each run's own cost is still its own calls' only: the counters count it once.
    assert first.cost_usd == 0.3
