"""A model call cut off mid-answer is spent: the endpoint has read the prompt and written
part of an answer, though it never reported the tokens. A caller who leaves a stream just
before its end must not run a canary past its budget unseen, so such a call is counted at
an estimate (four characters a token of the prompt it was sent and of the text streamed),
in the trace, the cost and token series and the canary's spend."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.analysis.test_budgets import PRICES as BUDGET_PRICES
from tests.analysis.test_budgets import paused_by_budget, start_canary
from tests.service.test_costs import PRICES, cost_of, cost_series
from tests.support import CallTools, Reply, ScriptedModelServer, Slow
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
)

WORDS = " ".join(f"word{i}" for i in range(30))


def token_series(text: str, agent: str) -> dict[str, float]:
    return {
        s.labels["kind"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "dynagent_tokens_total" and s.labels["agent"] == agent
    }


async def test_a_stream_its_caller_leaves_mid_answer_counts_the_cut_call(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    released = asyncio.Event()
    model_server.script("m-priced", [Reply(WORDS, gap=0.02, pause=released)])
    document = agent_document("bot", model_server, model={"name": "m-priced"})
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        service.write_agent(document)
        await service.wait_serving("bot", revision_of(document))
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "tell me a story", "stream": True}
        )
        trace_id = response.headers["X-Trace-Id"]
        async with asyncio.timeout(10):  # the answer has begun: its first delta came
            while b"event: model_delta" not in await response.content.readline():
                pass
        response.close()
        released.set()  # the rest of the answer meets the closed stream
        async with asyncio.timeout(10):
            while (trace := await _trace(service, trace_id)) is None:
                await asyncio.sleep(0.01)
        metrics = await (await service.client.get("/metrics")).text()

    events = trace["events"]
    kinds = [e["type"] for e in events]
    assert "model_response" not in kinds and kinds[-2:] == ["error", "run_finished"], kinds
    assert events[-2]["error_type"] == "disconnected"
    (request,) = [e for e in events if e["type"] == "model_request"]
    # The prompt the model was sent: the system prompt, the input and the roles.
    assert request["prompt_chars"] >= len("tell me a story") + len("system") + len("user")
    streamed = "".join(e["text"] for e in events if e["type"] == "model_delta")
    assert streamed and WORDS.startswith(streamed)
    usage = events[-1]["usage"]
    assert usage["input_tokens"] == -(-request["prompt_chars"] // 4)
    assert usage["output_tokens"] == -(-len(streamed) // 4)
    expected = round(cost_of("m-priced", usage), 8)
    assert events[-1]["cost_usd"] == expected > 0
    assert math.isclose(cost_series(metrics)["bot", revision_of(document), "stable"], expected)
    tokens = token_series(metrics, "bot")
    assert (tokens["input"], tokens["output"]) == (usage["input_tokens"], usage["output_tokens"])


async def test_a_canary_stream_cut_off_counts_toward_its_budget(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # The cut call is the canary's only spend: past a budget of one token, it is paused.
    released = asyncio.Event()
    model_server.script("m-canary", [Reply(WORDS, gap=0.02, pause=released)])
    config = service_config(agents_dir, state_dir, models={"prices": BUDGET_PRICES})
    async with running_service(config, environ={}) as service:
        budget = {"tokens": 1, "per": "rollout", "interval": 0.2}
        await start_canary(service, model_server, budget=budget)
        response = await service.client.post(
            "/v1/agents/bot/invoke",
            json={"input": "hi", "stream": True},
            headers={"X-Agent-Variant": "canary"},
        )
        async with asyncio.timeout(10):
            while b"event: model_delta" not in await response.content.readline():
                pass
        response.close()
        released.set()
        await service.registry.wait_for(paused_by_budget, within=30)
        status = service.registry.status("bot")["canary"]["budget"]

    assert status["exceeded"] and status["spent_tokens"] > 1, status


async def test_an_agent_called_as_a_tool_and_cut_off_with_its_caller_counts_its_call(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    # The caller's time runs out while the called agent's model is still answering.
    billing = agent_document("billing", model_server, model={"name": "m-cheap"})
    tools = [{"type": "agent", "name": "billing", "description": "Ask billing."}]
    front = agent_document(
        "front", model_server, model={"name": "m-priced"}, tools=tools, limits={"timeout": 0.5}
    )
    model_server.script("m-priced", [CallTools([("billing", {"input": "what is owed?"})])])
    model_server.script("m-cheap", [Slow(30, Reply("too late"))])
    config = service_config(agents_dir, state_dir, models={"prices": PRICES})
    async with running_service(config, environ={}) as service:
        for document in (billing, front):
            service.write_agent(document)
            await service.wait_serving(document["name"], revision_of(document))
        response = await service.client.post("/v1/agents/front/invoke", json={"input": "hi"})
        assert response.status == 504
        trace = await (
            await service.client.get(f"/v1/traces/{response.headers['X-Trace-Id']}")
        ).json()
        metrics = await (await service.client.get("/metrics")).text()

    [called] = trace["nested"]
    (request,) = [e for e in called["events"] if e["type"] == "model_request"]
    assert "run_finished" not in [e["type"] for e in called["events"]]  # cut off mid-call
    expected = round(
        cost_of("m-cheap", {"input_tokens": -(-request["prompt_chars"] // 4), "output_tokens": 0}),
        8,
    )
    assert expected > 0
    assert math.isclose(cost_series(metrics)["billing", revision_of(billing), "stable"], expected)


async def _trace(service: RunningService, trace_id: str) -> dict[str, Any] | None:
    found = await service.client.get(f"/v1/traces/{trace_id}")
    return None if found.status == 404 else dict(await found.json())
