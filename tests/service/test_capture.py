"""Backtests from production: served traffic (an HTTP tool server that counts its calls, a
secret it echoes back, sessions, an OpenAI-style message list) captured with
``dynagent eval capture`` into a suite file, and that suite replayed with ``run_suite``:
the tool server records zero calls during the replay, and the secret is in no file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import cli
from dynagent.evals.judge import Judge
from dynagent.evals.runner import PLACEHOLDER, run_suite
from dynagent.evals.spec import load_suite
from dynagent.masking import MASK
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.service import (
    RunningService,
    agent_document,
    running_service,
    service_config,
    write_agent,
)

ADMIN_KEY = "admin-key-0123456789abcdef"
USER_KEY = "user-key-0123456789abcdef"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}
TOKEN = "orders-token-5c1f0e9a7d"
"""The tool's credential: the tool server echoes it in every result."""
JUDGE_MODEL = "gpt-judge"


class ToolServer:
    """Orders (``GET /orders/{id}``) and parcels (``GET /track``), counting every call."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.url = ""

    async def orders(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        order = request.match_info["order"]
        seen = request.headers.get("Authorization", "")
        return web.json_response({"order": order, "status": "shipped", "auth": seen})

    async def track(self, request: web.Request) -> web.Response:
        self.calls.append(request.path)
        return web.json_response({"parcel": "at the depot"})


@pytest.fixture
async def tools(aiohttp_server: AiohttpServer) -> ToolServer:
    server = ToolServer()
    app = web.Application()
    app.router.add_get("/orders/{order}", server.orders)
    app.router.add_get("/track", server.track)
    running = await aiohttp_server(app, host="127.0.0.1")
    server.url = f"http://127.0.0.1:{running.port}"
    return server


def shop(server: ScriptedModelServer, tools: ToolServer) -> dict[str, Any]:
    """``shop``: an order lookup with a secret header, and a parcel tracker that is
    ``shadow_safe`` (an evaluation would call it for real, a replay never does)."""
    http = {"allow_hosts": ["127.0.0.1"], "allow_private": True}
    lookup = {
        "type": "http",
        "name": "lookup_order",
        "url": f"{tools.url}/orders/{{order_id}}",
        "headers": {"Authorization": "Bearer ${ORDERS_TOKEN}"},
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        **http,
    }
    track = {
        "type": "http",
        "name": "track_parcel",
        "url": f"{tools.url}/track",
        "parameters": {"type": "object", "properties": {}},
        "shadow_safe": True,
        **http,
    }
    return agent_document("shop", server, model={"retries": 0}, tools=[lookup, track])


@pytest.fixture
async def service(
    model_server: ScriptedModelServer, tools: ToolServer, agents_dir: Path, state_dir: Path
) -> AsyncIterator[RunningService]:
    write_agent(agents_dir, shop(model_server, tools))
    write_agent(agents_dir, agent_document("judge-bot", model_server, model={"name": JUDGE_MODEL}))
    config = service_config(agents_dir, state_dir, environment={"allow": ["ORDERS_TOKEN"]})
    environ = {
        "ORDERS_TOKEN": TOKEN,
        "DYNAGENT_API_KEYS": USER_KEY,
        "DYNAGENT_ADMIN_KEYS": ADMIN_KEY,
    }
    async with running_service(config, environ=environ) as running:
        yield running


async def invoke(service: RunningService, text: str, session: str | None = None) -> Any:
    body: dict[str, Any] = {"input": text}
    if session:
        body["session_id"] = session
    response = await service.client.post("/v1/agents/shop/invoke", json=body, headers=ADMIN)
    return response.status, await response.json()


async def serve_traffic(
    service: RunningService, model_server: ScriptedModelServer
) -> dict[str, str]:
    """Four runs: two turns of a session (one calling the lookup twice at once), a
    conversation sent whole as OpenAI messages, and a run that failed. Their trace ids."""
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("lookup_order", {"order_id": "7"})]),
            Reply("Order 7 has shipped."),
            CallTools([("lookup_order", {"order_id": "8"}), ("lookup_order", {"order_id": "9"})]),
            Reply("Orders 8 and 9 have shipped."),
            CallTools([("lookup_order", {"order_id": "10"})]),
            Reply("Order 10 has shipped, Ann."),
            Fail(500),
        ],
    )
    traces = {}
    status, body = await invoke(service, "Where is order 7?", "s1")
    traces["first"] = body["trace_id"]
    status, body = await invoke(service, "And orders 8 and 9?", "s1")
    traces["second"] = body["trace_id"]
    messages = [
        {"role": "system", "content": "The caller is Ann."},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi Ann, how can I help?"},
        {"role": "user", "content": [{"type": "text", "text": "Where is order 10?"}]},
    ]
    response = await service.client.post(
        "/v1/chat/completions", json={"model": "shop", "messages": messages}, headers=ADMIN
    )
    assert response.status == 200, await response.text()
    traces["chat"] = response.headers["X-Trace-Id"]
    status, body = await invoke(service, "Where is order 11?")
    assert status == 502, body
    return traces


def result(order: str) -> str:
    """What the lookup returned, as the trace keeps it: the credential masked."""
    return json.dumps({"order": order, "status": "shipped", "auth": MASK})


async def capture(service: RunningService, *args: str) -> int:
    """``dynagent eval capture`` in a thread (it blocks on its HTTP call)."""
    argv = ["eval", "capture", "shop", "--url", service.url, "--api-key", ADMIN_KEY, *args]
    code: int = await asyncio.to_thread(cli.main, argv)
    return code


async def test_a_capture_from_served_traffic_replays_without_calling_a_real_tool(
    service: RunningService,
    model_server: ScriptedModelServer,
    tools: ToolServer,
    tmp_path: Path,
) -> None:
    traces = await serve_traffic(service, model_server)
    assert len(tools.calls) == 4

    out = tmp_path / "shop.evals.yaml"
    assert await capture(service, "--last", "10", "--out", str(out)) == 0
    text = out.read_text(encoding="utf-8")
    assert TOKEN not in text  # the tool echoed the credential: masked as traces are
    document = yaml.safe_load(text)
    pairwise = [{"type": "pairwise", "threshold": 0.5}]
    common = {"live_tools": False, "tags": ["captured"], "assert": pairwise}
    assert document == {
        "judge": {"agent": "judge-bot"},
        "cases": [
            {
                "id": f"trace-{traces['first']}",
                "input": "Where is order 7?",
                "tool_results": {"lookup_order": result("7")},
                "reference": "Order 7 has shipped.",
                **common,
            },
            {
                "id": f"trace-{traces['second']}",
                "input": "And orders 8 and 9?",
                "history": [
                    {"role": "user", "content": "Where is order 7?"},
                    {"role": "assistant", "content": "Order 7 has shipped."},
                ],
                "tool_results": {"lookup_order": [result("8"), result("9")]},
                "reference": "Orders 8 and 9 have shipped.",
                **common,
            },
            {
                "id": f"trace-{traces['chat']}",
                "input": "Where is order 10?",
                "history": [
                    {"role": "system", "content": "The caller is Ann."},
                    {"role": "user", "content": "Hello"},
                    {"role": "assistant", "content": "Hi Ann, how can I help?"},
                ],
                "tool_results": {"lookup_order": result("10")},
                "reference": "Order 10 has shipped, Ann.",
                **common,
            },
        ],
    }

    latest = tmp_path / "latest.evals.yaml"
    assert await capture(service, "--last", "1", "--rubric", "Polite.", "--out", str(latest)) == 0
    only = yaml.safe_load(latest.read_text(encoding="utf-8"))["cases"]
    assert [(c["id"], c["assert"]) for c in only] == [
        (f"trace-{traces['chat']}", [{"type": "pairwise", "threshold": 0.5, "value": "Polite."}])
    ]

    # The replay: the candidate calls the lookup more often than the recorded run did, and
    # the shadow_safe tracker too; the judge compares each answer with the stable's.
    suite = load_suite(text)
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("lookup_order", {"order_id": "7"}), ("track_parcel", {})]),
            Reply("Order 7 has shipped."),
            CallTools([("lookup_order", {"order_id": "8"})]),
            CallTools([("lookup_order", {"order_id": "9"}), ("lookup_order", {"order_id": "x"})]),
            Reply("Both shipped."),
            CallTools([("lookup_order", {"order_id": "10"})]),
            Reply("Shipped, Ann."),
        ],
    )

    def judged(body: dict[str, Any]) -> str:
        prompt = body["messages"][-1]["content"]
        assert "Reference answer" in prompt
        return '{"score": 1, "reason": "as good"}'

    model_server.script(JUDGE_MODEL, [Reply(judged)] * 3)
    registry = service.registry
    judge = Judge(registry.get("judge-bot"))
    run = await run_suite(registry.get("shop"), suite, judge=judge, concurrency=1)

    assert len(tools.calls) == 4  # not one call during the replay
    assert (run.state, [c.passed for c in run.cases]) == ("passed", [True, True, True])
    replay = model_server.requests_for(DEFAULT_MODEL)[-7:]
    seen = [answer for body in replay for answer in new_tool_results(body)]
    assert seen == [
        result("7"),  # the recorded result
        PLACEHOLDER,  # the tracker, shadow_safe but not in the record: not called
        result("8"),
        result("9"),
        result("9"),  # a call past the recorded ones: the last one again
        result("10"),
    ]


def new_tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results a model request brings (those after the last assistant turn)."""
    messages = body["messages"]
    last = max(i for i, m in enumerate(messages) if m["role"] in ("assistant", "user"))
    return [m["content"] for m in messages[last + 1 :] if m["role"] == "tool"]


async def test_capture_asks_for_an_admin_key_and_bounded_parameters(
    service: RunningService, model_server: ScriptedModelServer
) -> None:
    async def get(query: str, key: str = ADMIN_KEY, name: str = "shop") -> tuple[int, Any]:
        response = await service.client.get(
            f"/v1/agents/{name}/capture{query}", headers={"Authorization": f"Bearer {key}"}
        )
        body = await response.json()
        return response.status, body["error"]["type"] if response.status >= 400 else body

    assert await get("") == (404, "not_found")  # nothing served yet
    model_server.script(DEFAULT_MODEL, [Reply("Hello.")])
    await invoke(service, "Hi")
    assert await get("", key=USER_KEY) == (403, "forbidden")
    for bad in ("?last=0", "?last=1001", "?last=-1", "?last=1e3", "?variant=both", "?judge=X!"):
        assert await get(bad) == (400, "bad_request"), bad
    assert await get("", name="nobody") == (404, "not_found")
    assert await get("?variant=canary") == (404, "not_found")
    status, body = await get("?last=1000&judge=grader")
    assert (status, body["cases"], body["skipped"], body["suite"]["judge"]) == (
        200,
        1,
        [],
        {"agent": "grader"},
    )
