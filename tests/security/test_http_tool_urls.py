"""HTTP tool arguments fill values, never URL structure: each placeholder fills one path
segment or one query value; ``.``, ``..``, nothing, or a value that would move the request
to another scheme, host, port or path is a ``TOOL_ERROR`` and the tool is never called."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import ConfigError
from tests.support import AgentFactory, CallTools, Reply, ScriptedModelServer

Hits = list[tuple[str, str | None]]
SECRET = "orders-token-0123456789"


@pytest.fixture
async def orders(aiohttp_server: AiohttpServer) -> tuple[str, Hits]:
    """A loopback API: its base URL and the (raw path, token header) of every request."""
    hits: Hits = []

    async def serve(request: web.Request) -> web.Response:
        hits.append((request.raw_path, request.headers.get("X-Token")))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", serve)
    server = await aiohttp_server(app, host="127.0.0.1")
    return f"http://127.0.0.1:{server.port}", hits


def tool_spec(url: str) -> dict[str, Any]:
    return {
        "type": "http",
        "name": "order_status",
        "url": url,
        "headers": {"X-Token": "${ORDERS_TOKEN}"},
        "parameters": {"type": "object", "properties": {}},
        "allow_hosts": ["127.0.0.1"],
        "allow_private": True,
    }


def refusal(name: str, value: str) -> str:
    return (
        f"TOOL_ERROR: ValueError: argument {name!r} = {value!r} would change the URL's "
        "structure: a placeholder fills one path segment (never '.', '..' or nothing) "
        "or one query value"
    )


STRUCTURAL = {
    "parent": ({"order_id": ".."}, "order_id", ".."),
    "current": ({"order_id": "."}, "order_id", "."),
    "empty": ({"order_id": ""}, "order_id", ""),
}


@pytest.mark.parametrize("arguments, name, value", STRUCTURAL.values(), ids=STRUCTURAL.keys())
async def test_a_value_that_is_path_structure_is_a_tool_error_and_never_sent(
    make_agent: AgentFactory,
    model_server: ScriptedModelServer,
    orders: tuple[str, Hits],
    arguments: dict[str, str],
    name: str,
    value: str,
) -> None:
    base, hits = orders
    make_agent.environ = {"ORDERS_TOKEN": SECRET}
    agent = make_agent(spec_tools=[tool_spec(f"{base}/orders/{{order_id}}/status")])
    model_server.script(
        "gpt-main", [CallTools([("order_status", arguments)]), Reply("could not look it up")]
    )

    await agent.run("where is my order?")

    assert model_server.requests[1]["messages"][-1]["content"] == refusal(name, value)
    assert hits == []


async def test_two_placeholders_cannot_together_make_a_dot_segment(
    make_agent: AgentFactory, orders: tuple[str, Hits]
) -> None:
    base, hits = orders
    make_agent.environ = {"ORDERS_TOKEN": SECRET}
    agent = make_agent(spec_tools=[tool_spec(f"{base}/orders/{{a}}{{b}}/status")])
    with pytest.raises(ValueError, match="would change the URL's structure"):
        await agent.tools["order_status"].function({"a": ".", "b": "."})
    assert hits == []


async def test_values_fill_one_segment_or_one_query_value_whatever_they_hold(
    make_agent: AgentFactory, orders: tuple[str, Hits]
) -> None:
    base, hits = orders
    make_agent.environ = {"ORDERS_TOKEN": SECRET}
    url = f"{base}/orders/{{order_id}}/status?view={{view}}&v=1"
    tool = make_agent(spec_tools=[tool_spec(url)]).tools["order_status"]
    filled = {
        "...": "a&v=2#x",
        "a.b": "?x=1",
        "O'Brien": "..",
        "%2e%2e": "%26",
        "x/../..": "=",
    }
    for order_id, view in filled.items():
        await tool.function({"order_id": order_id, "view": view})

    assert hits == [
        ("/orders/.../status?view=a%26v%3D2%23x&v=1", SECRET),
        ("/orders/a.b/status?view=?x%3D1&v=1", SECRET),
        ("/orders/O'Brien/status?view=..&v=1", SECRET),
        ("/orders/%252e%252e/status?view=%2526&v=1", SECRET),
        ("/orders/x%2F..%2F../status?view=%3D&v=1", SECRET),
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://{host}/orders",
        "http://127.0.0.1:{port}/orders",
        "http://user{x}@127.0.0.1/orders",
        "http://127.0.0.1/orders?{key}=1",
        "http://127.0.0.1/orders#{fragment}",
    ],
)
def test_a_placeholder_outside_the_path_and_query_values_is_a_build_error(
    make_agent: AgentFactory, url: str
) -> None:
    make_agent.environ = {"ORDERS_TOKEN": SECRET}
    with pytest.raises(ConfigError) as caught:
        make_agent(spec_tools=[tool_spec(url)])
    assert [(issue.path, issue.message) for issue in caught.value.issues] == [
        (
            "tools[order_status].url",
            "a {placeholder} may fill only a path segment or a query value, "
            "never the scheme, host, port, user, query name or fragment",
        )
    ]


def test_a_template_whose_own_path_is_not_normal_is_a_build_error(make_agent: AgentFactory) -> None:
    make_agent.environ = {"ORDERS_TOKEN": SECRET}
    for url in ("http://127.0.0.1/a/../orders/{id}", "http://127.0.0.1/%2e%2e/{id}"):
        with pytest.raises(ConfigError) as caught:
            make_agent(spec_tools=[tool_spec(url)])
        assert [(issue.path, issue.message) for issue in caught.value.issues] == [
            (
                "tools[order_status].url",
                "the URL's fixed path changes once normalised ('.', '..' or an encoded dot "
                "in it): write the path it means",
            )
        ]
