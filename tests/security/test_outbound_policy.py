"""One outbound policy for every connection a tool opens: an HTTP tool's request, an MCP
server's session (by URL or through a registry), a remote agent's card and the endpoint
the card names. Only allowed hosts; loopback, private and metadata addresses only with
``allow_private``, whether written as an address or reached through a name; credentials
only to the origin they were configured for."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from a2a.types import Message, Part, Role, SendMessageSuccessResponse, TextPart
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import AgentBuilder, ConfigError, Resources, load_spec
from dynagent.a2a.client import remote_agent_tool
from dynagent.mcp._pool import McpPool
from dynagent.mcp._registry import RegistryEntry, endpoint_target
from dynagent.mcp._transport import McpTarget, _Checked
from dynagent.mcp.tools import McpServers
from dynagent.runtime.outbound import OutboundPolicy
from tests.mcp.conftest import McpProcess, mcp_process

TOKEN = "Bearer a2a-credential-0123456789abcdef"

PRIVATE_LITERALS = [
    "127.0.0.1",
    "[::1]",
    "[::ffff:127.0.0.1]",
    "169.254.169.254",  # cloud metadata
    "10.0.0.7",
    "[fd00::1]",
    "[64:ff9b::a9fe:a9fe]",  # NAT64 of the metadata address
]


@pytest.fixture
async def servers() -> AsyncIterator[McpServers]:
    found = McpServers()
    yield found
    await found.aclose()


@pytest.fixture
async def resources() -> AsyncIterator[Resources]:
    shared = Resources()
    yield shared
    await shared.aclose()


def build(builder: AgentBuilder, *tools: dict[str, Any]) -> Any:
    spec = load_spec(
        {"name": "bot", "model": {"provider": "test"}, "prompt": {"system": "x"}, "tools": [*tools]}
    )
    return builder.build(spec)


def issues(refused: pytest.ExceptionInfo[ConfigError]) -> list[tuple[str, str]]:
    return [(issue.path, issue.message) for issue in refused.value.issues]


def entry_of(kind: str, url: str, **fields: Any) -> dict[str, Any]:
    """A ``kind`` entry reaching ``url``, as its own field names say it."""
    if kind == "http":
        return {"type": "http", "name": "t", "url": url, **fields}
    if kind == "mcp":
        return {"type": "mcp", "name": "t", "url": url, **fields}
    return {"type": "agent", "name": "t", "a2a": {"url": url}, **fields}


URL_FIELD = {"mcp": "tools[t].url", "agent": "tools[t].a2a.url"}


@pytest.mark.parametrize("kind", ["mcp", "agent"])
@pytest.mark.parametrize("host", PRIVATE_LITERALS)
async def test_every_tool_kind_refuses_a_private_address_unless_allowed(
    servers: McpServers, resources: Resources, kind: str, host: str
) -> None:
    builder = AgentBuilder(environ={}, mcp=servers, resources=resources)
    with pytest.raises(ConfigError) as refused:
        build(builder, entry_of(kind, f"http://{host}/a2a/x"))
    bare = host.strip("[]")
    assert issues(refused) == [
        (
            URL_FIELD[kind],
            f"address {bare} is private or loopback; set allow_private: true on the tool "
            "to reach it",
        )
    ]
    # The HTTP tool says the same, at call time (its host is fixed at build time).
    http = build(builder, entry_of("http", f"http://{host}/x", allow_hosts=[bare]))
    with pytest.raises(PermissionError, match=f"^address {bare} is private or loopback$"):
        await http.tools["t"].function({})


@pytest.mark.parametrize("kind", ["mcp", "agent"])
def test_a_url_outside_the_entrys_allow_hosts_is_refused(
    servers: McpServers, resources: Resources, kind: str
) -> None:
    builder = AgentBuilder(environ={}, mcp=servers, resources=resources)
    for host, allowed in (
        ("evil-example.com", ["*.example.com"]),
        ("example.com", ["*.example.com"]),
        ("api.example.com.evil.net", ["api.example.com"]),
    ):
        with pytest.raises(ConfigError) as refused:
            build(builder, entry_of(kind, f"https://{host}/a", allow_hosts=allowed))
        assert issues(refused) == [
            (URL_FIELD[kind], f"host {host!r} is not in this tool's allow_hosts")
        ]


def test_the_policy_fields_are_refused_where_no_connection_is_made() -> None:
    entries = [
        {"type": "mcp", "name": "files", "server": "local", "allow_private": True},
        {"type": "agent", "name": "billing", "allow_hosts": ["billing.example.com"]},
    ]
    for entry in entries:
        with pytest.raises(ConfigError) as refused:
            load_spec({"name": "bot", "prompt": {"system": "x"}, "tools": [entry]})
        [(_, message)] = issues(refused)
        assert "'allow_hosts' and 'allow_private' go with" in message


@pytest.fixture
async def http_server() -> AsyncIterator[McpProcess]:
    async with mcp_process("streamable_http") as server:
        yield server


async def test_an_mcp_name_resolving_to_loopback_is_refused_when_it_connects(
    http_server: McpProcess,
) -> None:
    """``localhost`` is a name: the address check runs on what it resolves to, at the
    connection (a DNS answer cannot change between check and connect)."""
    pool = McpPool()
    url = http_server.url.replace("127.0.0.1", "localhost")
    refused = McpTarget("streamable_http", url, url=url, policy=OutboundPolicy(("localhost",)))
    allowed = McpTarget(
        "streamable_http", url, url=url, policy=OutboundPolicy(("localhost",), True)
    )
    try:
        pool.connection(refused)
        pool.connection(allowed)
        await pool.wait_for(lambda: {c["state"] for c in pool.status()} == {"down", "connected"})
        states = {(s["state"], s["last_error"]) for s in pool.status()}
    finally:
        await pool.aclose()
    assert states == {
        ("down", "refused: localhost resolves only to private or loopback addresses"),
        ("connected", None),
    }


async def test_registry_endpoints_follow_the_entrys_policy(http_server: McpProcess) -> None:
    """An MCP server found in a registry is reached only where the entry allows."""
    entry = RegistryEntry("orders", "1.0.0", "streamable_http", (http_server.url,), ())
    pool = McpPool()
    public_only = endpoint_target(entry, http_server.url, OutboundPolicy())
    try:
        pool.connection(public_only)
        await pool.wait_for(lambda: pool.status()[0]["state"] == "down")
        [status] = pool.status()
    finally:
        await pool.aclose()
    assert status["last_error"] == "refused: address 127.0.0.1 is private or loopback"


Hits = list[tuple[str, str | None]]


@pytest.fixture
async def card_server(aiohttp_server: AiohttpServer) -> tuple[int, dict[str, str], Hits]:
    """An A2A agent whose card names whatever endpoint the test puts in ``names``; every
    request it gets is recorded with the ``Authorization`` it carried."""
    names: dict[str, str] = {}
    hits: Hits = []

    async def card(request: web.Request) -> web.Response:
        hits.append((f"{request.host}{request.path}", request.headers.get("Authorization")))
        return web.json_response(
            {
                "name": "billing",
                "description": "Bills.",
                "version": "1",
                "url": names["endpoint"],
                "capabilities": {},
                "default_input_modes": ["text/plain"],
                "default_output_modes": ["text/plain"],
                "skills": [],
            }
        )

    async def rpc(request: web.Request) -> web.Response:
        hits.append((f"{request.host}{request.path}", request.headers.get("Authorization")))
        body = await request.json()
        message = Message(
            role=Role.agent, message_id="m1", parts=[Part(root=TextPart(text="paid"))]
        )
        answer = SendMessageSuccessResponse(id=body["id"], result=message)
        return web.json_response(answer.model_dump(mode="json", by_alias=True, exclude_none=True))

    app = web.Application()
    app.router.add_get("/card/.well-known/agent-card.json", card)
    app.router.add_post("/rpc", rpc)
    server = await aiohttp_server(app, host="127.0.0.1")
    assert server.port is not None
    return server.port, names, hits


async def ask(
    resources: Resources, url: str, policy: OutboundPolicy, headers: dict[str, str]
) -> str:
    async def resolve() -> str:
        return url

    session = resources.http_session(allow_private=policy.allow_private)
    tool = remote_agent_tool("billing", "", resolve, session, headers=headers, policy=policy)
    answer: str = await tool.function({"input": "how much?"})
    return answer


async def test_a_card_cannot_send_the_call_or_its_credentials_elsewhere(
    resources: Resources, card_server: tuple[int, dict[str, str], Hits]
) -> None:
    port, names, hits = card_server
    card = f"http://127.0.0.1:{port}/card/.well-known/agent-card.json"
    credentials = {"Authorization": TOKEN}
    only_here = OutboundPolicy.of(card, None, True)
    both = OutboundPolicy(("127.0.0.1", "localhost"), True)
    refusals = [
        # another host, not allowed
        (f"http://localhost:{port}/rpc", only_here, {}, "host 'localhost' is not in"),
        # another host, allowed, but the credentials are for the card's origin
        (f"http://localhost:{port}/rpc", both, credentials, "credentials are for"),
        # the same host on another port: another origin
        (f"http://127.0.0.1:{port + 1}/rpc", both, credentials, "credentials are for"),
        # https to the same host and port: another origin too
        (f"https://127.0.0.1:{port}/rpc", both, credentials, "credentials are for"),
    ]
    for endpoint, policy, headers, reason in refusals:
        names["endpoint"] = endpoint
        hits.clear()
        with pytest.raises(PermissionError, match=reason):
            await ask(resources, card, policy, headers)
        assert hits == [
            (f"127.0.0.1:{port}/card/.well-known/agent-card.json", headers.get("Authorization"))
        ]

    # Allowed: the endpoint on another allowed host, with no credentials to carry there;
    # and the card's own origin with them.
    names["endpoint"] = f"http://localhost:{port}/rpc"
    hits.clear()
    assert await ask(resources, card, both, {}) == "paid"
    names["endpoint"] = f"http://127.0.0.1:{port}/rpc"
    assert await ask(resources, card, only_here, credentials) == "paid"
    assert hits == [
        (f"127.0.0.1:{port}/card/.well-known/agent-card.json", None),
        (f"localhost:{port}/rpc", None),
        (f"127.0.0.1:{port}/card/.well-known/agent-card.json", TOKEN),
        (f"127.0.0.1:{port}/rpc", TOKEN),
    ]


async def test_a_remote_agent_on_a_name_resolving_to_loopback_is_refused(
    resources: Resources, card_server: tuple[int, dict[str, str], Hits]
) -> None:
    port, names, hits = card_server
    names["endpoint"] = f"http://localhost:{port}/rpc"
    card = f"http://localhost:{port}/card/.well-known/agent-card.json"
    with pytest.raises(PermissionError, match="resolves only to private or loopback"):
        await ask(resources, card, OutboundPolicy.of(card, None, False), {})
    assert hits == []


async def test_every_mcp_request_is_checked_redirects_included() -> None:
    """The MCP SDK follows a redirect only within the server's origin; whatever it sends,
    each request passes the policy and the entry's headers go to the URL's origin only."""
    url = "https://mcp.example.com/mcp"
    target = McpTarget(
        "streamable_http",
        url,
        url=url,
        headers=(("Authorization", TOKEN),),
        policy=OutboundPolicy.of(url, ["mcp.example.com", "*.example.com"], False),
    )
    checked = _Checked(target)
    await checked(httpx2.Request("POST", "https://mcp.example.com:443/mcp/"))  # same origin
    refusals = {
        "https://other.example.com/mcp": "credentials are for https://mcp.example.com:443",
        "http://mcp.example.com/mcp": "credentials are for https://mcp.example.com:443",
        "https://evil.test/mcp": "host 'evil.test' is not in this tool's allow_hosts",
        "https://[::ffff:a9fe:a9fe]/mcp": "is not in this tool's allow_hosts",
    }
    for sent, reason in refusals.items():
        with pytest.raises(PermissionError, match=reason):
            await checked(httpx2.Request("POST", sent))
