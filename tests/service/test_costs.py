"""What runs cost (``models.prices``): in the answer's ``usage``, the trace, the
``run_finished`` event and ``dynagent_cost_usd_total``; and ``limits.max_cost_usd``, the
ceiling of one run."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dynagent.config import load_config
from dynagent.exceptions import ConfigError
from dynagent.tools import ToolRegistry
from tests.support import CallTools, Fail, Reply, ScriptedModelServer
from tests.support.service import (
    Gate,
    RunningService,
    agent_document,
    parse_sse,
    revision_of,
    running_service,
    service_config,
)

PRICES = {
    "m-priced": {"input": 3.0, "output": 15.0},
    "m-cheap": {"input": 0.5, "output": 1.0},
}
"""US dollars per million tokens."""


def cost_of(model: str, usage: dict[str, Any]) -> float:
    price = PRICES[model]
    spent = usage["input_tokens"] * price["input"] + usage["output_tokens"] * price["output"]
    return float(spent) / 1e6


async def serve(service: RunningService, document: dict[str, Any]) -> None:
    service.write_agent(document)
    await service.wait_serving(document["name"], revision_of(document))


def cost_series(text: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["agent"], s.labels["revision"], s.labels["variant"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dynagent_cost_usd_total"
    }


async def trace_of(service: RunningService, trace_id: str) -> dict[str, Any]:
    listed = await (await service.client.get("/v1/traces")).json()
    (summary,) = [t for t in listed["traces"] if t["trace_id"] == trace_id]
    return dict(summary)


async def test_a_priced_model_gives_every_run_a_cost_and_an_unpriced_one_none(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    priced = agent_document("priced", model_server, model={"name": "m-priced"})
    unpriced = agent_document("unpriced", model_server, model={"name": "m-unpriced"})
    model_server.script("m-priced", [Reply("four"), Reply("streamed answer")])
    model_server.script("m-unpriced", [Reply("no price")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        await serve(service, priced)
        await serve(service, unpriced)
        whole = await service.client.post("/v1/agents/priced/invoke", json={"input": "2+2?"})
        answer = await whole.json()
        streamed = await service.client.post(
            "/v1/agents/priced/invoke", json={"input": "again", "stream": True}
        )
        events = parse_sse(await streamed.text())
        free = await (
            await service.client.post("/v1/agents/unpriced/invoke", json={"input": "hi"})
        ).json()
        summaries = [await trace_of(service, a["trace_id"]) for a in (answer, free)]
        metrics = await (await service.client.get("/metrics")).text()

    usage = {k: v for k, v in answer["usage"].items() if k != "cost_usd"}
    expected = round(cost_of("m-priced", usage), 8)
    assert expected > 0
    assert answer["usage"] == {**usage, "cost_usd": expected}
    assert summaries[0]["cost_usd"] == expected
    assert summaries[0]["usage"] == usage
    # An unknown cost is absent from the answer, and null in the trace.
    assert "cost_usd" not in free["usage"]
    assert summaries[1]["cost_usd"] is None
    (finished,) = [data for name, data in events if name == "run_finished"]
    assert finished["cost_usd"] == round(cost_of("m-priced", finished["usage"]), 8)
    series = cost_series(metrics)
    revision = revision_of(priced)
    assert series.keys() == {("priced", revision, "stable")}  # none for the unpriced agent
    assert math.isclose(series["priced", revision, "stable"], expected + finished["cost_usd"])


async def test_a_run_its_caller_leaves_counts_what_its_answered_calls_cost(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # One call answers (a tool call), then the caller leaves while the tool runs: the
    # trace ends as disconnected, and budgets and the trace count that call (and the next
    # one, if the run started it before it met the closed stream: ``test_cut_calls.py``).
    gate = Gate()
    tools = ToolRegistry.default({"gate": gate.tool})
    model_server.script("m-priced", [CallTools([("gate", {})])], cycle=True)
    document = agent_document("bot", model_server, model={"name": "m-priced"}, tools=["gate"])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}, tools=tools) as service:
        await serve(service, document)
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "stream": True}
        )
        trace_id = response.headers["X-Trace-Id"]
        await gate.entered.wait()
        response.close()
        gate.opened.set()
        async with asyncio.timeout(10):  # the run ends once it meets the closed stream
            while (summary := await _listed(service, trace_id)) is None:
                await asyncio.sleep(0.01)
        trace = await (await service.client.get(f"/v1/traces/{trace_id}")).json()
        metrics = await (await service.client.get("/metrics")).text()

    events = trace["events"]
    error, finished = events[-2:]
    assert (error["type"], error["error_type"]) == ("error", "disconnected")
    assert (finished["type"], finished["status"]) == ("run_finished", "error")
    answered = [e for e in events if e["type"] == "model_response"]
    usage = answered[0]["usage"]
    assert answered[0]["cost_usd"] == round(cost_of("m-priced", usage), 8) > 0
    last = max(i for i, e in enumerate(events) if e["type"] == "model_request")
    cut = [] if events[last + 1]["type"] == "model_response" else [events[last]]
    estimated = [{"input_tokens": -(-e["prompt_chars"] // 4), "output_tokens": 0} for e in cut]
    used = [e["usage"] for e in answered] + estimated
    expected = round(sum(cost_of("m-priced", u) for u in used), 8)
    assert finished["cost_usd"] == summary["cost_usd"] == expected
    assert summary["usage"]["input_tokens"] == sum(u["input_tokens"] for u in used)
    assert math.isclose(cost_series(metrics)["bot", revision_of(document), "stable"], expected)


async def test_the_agents_a_run_calls_as_tools_count_their_own_spend(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    billing = agent_document("billing", model_server, model={"name": "m-cheap"})
    tools = [{"type": "agent", "name": "billing", "description": "Ask billing."}]
    front = agent_document("front", model_server, model={"name": "m-priced"}, tools=tools)
    model_server.script("m-priced", [CallTools([("billing", {"input": "owed?"})]), Reply("ok")])
    model_server.script("m-cheap", [Reply("You owe 12 EUR.")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        await serve(service, billing)
        await serve(service, front)
        answer = await (
            await service.client.post("/v1/agents/front/invoke", json={"input": "hi"})
        ).json()
        trace = await (await service.client.get(f"/v1/traces/{answer['trace_id']}")).json()
        metrics = await (await service.client.get("/metrics")).text()

    [called] = trace["nested"]
    [closed] = [e for e in called["events"] if e["type"] == "run_finished"]
    assert closed["cost_usd"] == round(cost_of("m-cheap", closed["usage"]), 8) > 0
    series = cost_series(metrics)
    # Each on its own agent: the caller's own calls, and the called agent's run.
    assert math.isclose(series["billing", revision_of(billing), "stable"], closed["cost_usd"])
    assert math.isclose(series["front", revision_of(front), "stable"], answer["usage"]["cost_usd"])


async def _listed(service: RunningService, trace_id: str) -> dict[str, Any] | None:
    listed = await (await service.client.get("/v1/traces")).json()
    found = [t for t in listed["traces"] if t["trace_id"] == trace_id]
    return found[0] if found else None


async def test_a_fallback_answer_is_priced_as_the_fallback_model(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    fallback = {"provider": "openai", "base_url": model_server.base_url, "api_key": "x"}
    document = agent_document(
        "bot",
        model_server,
        model={"name": "m-priced", "retries": 0, "fallback": {**fallback, "name": "m-cheap"}},
    )
    model_server.script("m-priced", [Fail(500)])
    model_server.script("m-cheap", [Reply("from the fallback")])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        await serve(service, document)
        answer = await (
            await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        ).json()

    assert answer["output"] == "from the fallback"
    assert answer["usage"]["cost_usd"] == round(cost_of("m-cheap", answer["usage"]), 8)


async def test_a_run_that_spends_its_max_cost_ends_with_cost_limit_and_is_counted(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # Every step asks for a tool again: only the ceiling can end the run before max_steps.
    looping = [CallTools([("calculator", {"expression": "1+1"})])] * 2
    model_server.script("m-priced", looping)
    document = agent_document(
        "bot",
        model_server,
        model={"name": "m-priced"},
        tools=["calculator"],
        limits={"max_steps": 10, "max_cost_usd": 1e-9},
    )
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        await serve(service, document)
        response = await service.client.post("/v1/agents/bot/invoke", json={"input": "hi"})
        body = await response.json()
        streamed = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi", "stream": True}
        )
        events = parse_sse(await streamed.text())
        summary = await trace_of(service, body["error"]["trace_id"])
        metrics = await (await service.client.get("/metrics")).text()

    assert response.status == 429
    error = body["error"]
    assert error["type"] == "cost_limit"
    assert error["message"].startswith("the run spent $0.000")
    assert "of limits.max_cost_usd = $1e-09 after model call 1" in error["message"]
    assert summary["status"] == "error"
    assert summary["cost_usd"] > 1e-9
    assert summary["steps"] == 1  # the call that went past the ceiling was the last
    assert [name for name, _ in events][-2:] == ["error", "run_finished"]
    assert events[-2][1]["error_type"] == "cost_limit"
    errors = {
        s.labels["type"]: s.value
        for family in text_string_to_metric_families(metrics)
        for s in family.samples
        if s.name == "dynagent_errors_total" and s.labels["agent"] == "bot"
    }
    assert errors == {"cost_limit": 2.0}


@pytest.mark.parametrize(
    ("model", "unpriced"),
    [
        ({"name": "m-unpriced"}, "'m-unpriced'"),
        ({"name": "m-priced", "fallback": {"provider": "test", "name": "m-free"}}, "'m-free'"),
    ],
    ids=["model", "fallback"],
)
async def test_a_cost_ceiling_on_a_model_without_a_price_is_refused_at_build(
    model_server: ScriptedModelServer,
    agents_dir: Path,
    state_dir: Path,
    model: dict[str, Any],
    unpriced: str,
) -> None:
    document = agent_document("bot", model_server, model=model, limits={"max_cost_usd": 0.5})
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        service.write_agent(document)
        await service.registry.wait_for(
            lambda r: "bot" in r and r.entry("bot").last_error is not None
        )
        last_error = service.registry.status("bot")["last_error"]

    assert last_error["path"] == "limits.max_cost_usd"
    assert (
        f"model {unpriced} has no price in the service config's models.prices"
        in (last_error["message"])
    )
    assert "priced: m-cheap, m-priced" in last_error["message"]


@pytest.mark.parametrize(
    ("prices", "path", "message"),
    [
        ("{m: {input: -1, output: 2}}", "models.prices.m.input", "greater than or equal to 0"),
        ("{m: {input: .inf, output: 2}}", "models.prices.m.input", "finite number"),
        ("{m: {input: .nan, output: 2}}", "models.prices.m.input", "finite number"),
        ("{m: {input: 1}}", "models.prices.m.output", "required"),
        ("{m: {input: 1, output: 1, cached: 0.1}}", "models.prices.m.cached", "unknown field"),
        ("{m: {input: 1, output: 1, cached_input: -0.1}}", "models.prices.m.cached_input", "0"),
        ("{m: 3}", "models.prices.m", ""),
        ("[m]", "models.prices", ""),
    ],
)
def test_bad_prices_are_config_errors_naming_the_field(
    tmp_path: Path, prices: str, path: str, message: str
) -> None:
    file = tmp_path / "dynagent.yaml"
    file.write_text(f"models:\n  prices: {prices}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_config(file, environ={})
    (issue,) = raised.value.issues
    assert issue.path == path
    assert message in issue.message


def test_cached_input_tokens_are_priced_apart_when_a_price_is_given(tmp_path: Path) -> None:
    from dynagent.events import Usage
    from dynagent.models._answers import usage_of

    usage = usage_of(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 800},
        }
    )
    assert usage == Usage(1000, 10, 800)
    assert usage_of(
        {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": None}
    ) == (Usage(5, 1, 0))
    file = tmp_path / "dynagent.yaml"
    file.write_text(
        "models:\n  prices:\n    a: {input: 2, output: 10, cached_input: 0.5}\n"
        "    b: {input: 2, output: 10}\n",
        encoding="utf-8",
    )
    prices = load_config(file, environ={}).models.price_list()
    assert prices.cost("a", usage) == pytest.approx((200 * 2 + 800 * 0.5 + 10 * 10) / 1e6)
    assert prices.cost("b", usage) == pytest.approx((1000 * 2 + 10 * 10) / 1e6)
    assert prices.cost("c", usage) is None


def test_a_run_that_has_spent_its_ceiling_makes_no_further_model_call() -> None:
    """The check before each call: a run at exactly its ceiling would pass it with any
    call, so none starts (the check after a call ends runs that went past it)."""
    from types import MappingProxyType

    from dynagent.events import Usage
    from dynagent.exceptions import CostLimitExceeded
    from dynagent.interceptors.base import RunContext
    from dynagent.models.base import ModelResponse
    from dynagent.models.prices import Price, Prices
    from dynagent.runtime._costs import CostMeter

    prices = Prices(MappingProxyType({"m": Price(1.0, 1.0)}))
    meter = CostMeter(prices, "m", limit=0.5)
    ctx = RunContext("t", "bot", "r", {})
    answer = ModelResponse("a", usage=Usage(250_000, 250_000))
    meter.after_call(ctx, meter.cost(answer))  # exactly $0.50
    assert ctx.cost_usd == 0.5
    ctx.model_calls = 1
    try:
        meter.before_call(ctx)
    except CostLimitExceeded as exc:
        assert (exc.spent, exc.limit, exc.kind) == (0.5, 0.5, "cost_limit")
        assert exc.message == (
            "the run spent $0.500000 of limits.max_cost_usd = $0.5 before another model "
            "call; raise the limit or shorten the run"
        )
    else:
        raise AssertionError("a run at its ceiling made another call")
    # A fallback's answer is priced as the fallback; an unpriced one makes the cost unknown.
    fallback = ModelResponse("b", usage=Usage(1, 1), priced_as="other")
    assert meter.cost(fallback) is None
    meter.after_call(ctx, meter.cost(fallback))
    assert ctx.cost_usd is None
    meter.before_call(ctx)  # an unknown cost cannot be held to a ceiling; the build refuses it


def test_what_a_run_cut_off_spent_is_summed_over_its_answered_calls() -> None:
    from dynagent.events import ModelResponseEvent, RunFinished, Usage, spent

    def answered(cost: float | None) -> ModelResponseEvent:
        usage = Usage(10, 5)
        return ModelResponseEvent(
            trace_id="t", step=1, model="m", content="", tool_calls=[], usage=usage,
            duration_ms=1.0, cost_usd=cost,
        )  # fmt: skip

    assert spent([]) == (Usage(), 0.0)
    assert spent([answered(0.1), answered(0.2)]) == (Usage(20, 10), 0.3)
    assert spent([answered(0.1), answered(None)]) == (Usage(20, 10), None)  # one unpriced
    closed = RunFinished(
        trace_id="t", step=2, status="ok", usage=Usage(1, 1), duration_ms=2.0, cost_usd=0.5
    )
    assert spent([answered(0.1), closed]) == (Usage(1, 1), 0.5)  # as the closing event says
