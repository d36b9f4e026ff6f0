"""The declarative HTTP tool against server-side request forgery: only allow-listed hosts,
never a private, loopback, link-local or metadata address unless ``allow_private``,
whatever form the address takes, and redirects are never followed."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from dynagent import AgentBuilder, Resources, Tool, ToolCallError, load_spec
from dynagent.runtime.resources import is_public_address

Hits = list[str]


@pytest.fixture
async def resources() -> Any:
    shared = Resources()
    yield shared
    await shared.aclose()


def http_tool(resources: Resources, url: str, allow_hosts: list[str], **extra: Any) -> Tool:
    tool = {
        "type": "http",
        "name": "fetch",
        "url": url,
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        "allow_hosts": allow_hosts,
        **extra,
    }
    spec = load_spec(
        {"name": "bot", "model": {"provider": "test"}, "prompt": {"system": "x"}, "tools": [tool]}
    )
    return AgentBuilder(environ={}, resources=resources).build(spec).tools["fetch"]


@pytest.fixture
async def internal(aiohttp_server: AiohttpServer) -> tuple[int, Hits]:
    """A loopback service standing in for an internal one: its port and the paths it served."""
    hits: Hits = []

    async def serve(request: web.Request) -> web.Response:
        hits.append(request.raw_path)
        if request.path == "/hop":
            raise web.HTTPFound(f"http://127.0.0.1:{request.url.port}/secret")
        return web.Response(text=f"internal {request.path}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    server = await aiohttp_server(app, host="127.0.0.1")
    assert server.port is not None
    return server.port, hits


LITERALS = [
    "169.254.169.254",  # cloud metadata (link-local)
    "[::ffff:169.254.169.254]",
    "[fe80::1%25eth0]",  # link-local with a zone
    "100.64.0.1",  # shared address space
    "192.168.0.10",
    "172.16.0.1",
    "224.0.0.1",  # multicast
    "[fd00::1]",  # unique local
    "[::]",
]


@pytest.mark.parametrize("host", LITERALS)
async def test_private_and_metadata_addresses_are_refused_before_connecting(
    resources: Resources, host: str
) -> None:
    bare = host.strip("[]")  # as urlsplit gives the host name
    tool = http_tool(resources, f"http://{host}/latest/meta-data/", [bare])
    with pytest.raises(PermissionError, match="is private or loopback"):
        await tool.function({})


@pytest.mark.parametrize("host", ["localhost", "localhost.", "0x7f000001", "127.0.0.1.nip.invalid"])
async def test_names_that_resolve_to_loopback_are_refused(
    resources: Resources, internal: tuple[int, Hits], host: str
) -> None:
    port, hits = internal
    tool = http_tool(resources, f"http://{host}:{port}/admin", [host.rstrip(".")])
    # Refused by the resolver, or not resolved at all: which one depends on the machine's
    # resolver (``localhost.`` resolves on some, not on others). Never a request.
    with pytest.raises((PermissionError, ToolCallError)) as caught:
        await tool.function({})
    assert hits == []
    if isinstance(caught.value, PermissionError):
        assert "resolves only to private or loopback addresses" in str(caught.value)


async def test_hosts_outside_the_allow_list_are_refused_even_when_private_is_allowed(
    resources: Resources, internal: tuple[int, Hits]
) -> None:
    port, hits = internal
    for url, allowed in (
        (f"http://127.0.0.1:{port}/x", ["api.example.com"]),
        (f"http://localhost:{port}/x", ["*.localhost"]),
        (f"http://evil-example.com:{port}/x", ["*.example.com"]),
    ):
        tool = http_tool(resources, url, allowed, allow_private=True)
        with pytest.raises(PermissionError, match="not in this tool's allow_hosts"):
            await tool.function({})
    assert hits == []


async def test_redirects_are_never_followed(
    resources: Resources, internal: tuple[int, Hits]
) -> None:
    port, hits = internal
    tool = http_tool(resources, f"http://127.0.0.1:{port}/hop", ["127.0.0.1"], allow_private=True)
    await tool.function({})
    assert hits == ["/hop"]  # the 302 came back; /secret was never asked for


@pytest.mark.parametrize("value", ["@127.0.0.1/", "../admin", "x?admin=1", "x#frag", "x/../../y"])
async def test_arguments_cannot_change_the_host_or_the_path(
    resources: Resources, internal: tuple[int, Hits], value: str
) -> None:
    port, hits = internal
    url = f"http://127.0.0.1:{port}/items/{{id}}"
    tool = http_tool(resources, url, ["127.0.0.1"], allow_private=True)
    await tool.function({"id": value})
    (path,) = hits
    segment = path.removeprefix("/items/")
    assert "/" not in segment and unquote(segment) == value  # one segment, still encoded


EMBEDDED_PRIVATE = {
    "IPv4-compatible loopback": "::127.0.0.1",
    "IPv4-compatible metadata": "::169.254.169.254",
    "IPv4-mapped private": "::ffff:10.0.0.1",
    "IPv4-translated loopback": "::ffff:0:127.0.0.1",
    "6to4 of loopback": "2002:7f00:1::1",
    "6to4 of private": "2002:c0a8:a::",
    "NAT64 of loopback": "64:ff9b::127.0.0.1",
    "NAT64 of metadata": "64:ff9b::a9fe:a9fe",
    "local NAT64 of private": "64:ff9b:1::10.1.2.3",
    "Teredo, client loopback": "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "Teredo, server private": "2001:0:a00:1::1",
}
EMBEDDED_PUBLIC = {
    "IPv4-compatible public": "::8.8.8.8",
    "6to4 of public": "2002:808:808::1",
    "NAT64 of public": "64:ff9b::8.8.8.8",
}


@pytest.mark.parametrize("address", EMBEDDED_PRIVATE.values(), ids=EMBEDDED_PRIVATE.keys())
async def test_ipv6_forms_that_embed_a_private_ipv4_are_judged_by_it(
    resources: Resources, address: str
) -> None:
    # The same judgement serves the resolver (names) and literal hosts.
    assert is_public_address(address) is False
    tool = http_tool(resources, f"http://[{address}]/latest/meta-data/", [address])
    with pytest.raises(PermissionError, match="is private or loopback"):
        await tool.function({})


@pytest.mark.parametrize("address", EMBEDDED_PUBLIC.values(), ids=EMBEDDED_PUBLIC.keys())
def test_ipv6_forms_that_embed_a_public_ipv4_stay_public(address: str) -> None:
    assert is_public_address(address) is True


# Ranges Python's ``is_global`` still calls global though no public host lives there:
# the deprecated IPv6 site-local range (RFC 3879), the documentation ranges, and the
# IPv4 benchmarking and reserved ranges. Each must be refused like a private address.
NOT_PUBLIC_BY_RFC = {
    "site-local fec0::/10": "fec0::1",
    "site-local, last of the range": "feff:ffff::1",
    "site-local with a zone": "fec0::1%eth0",
    "documentation 2001:db8::/32": "2001:db8::1",
    "documentation 3fff::/20": "3fff::1",
    "benchmarking 198.18.0.0/15": "198.18.0.1",
    "reserved 240.0.0.0/4": "240.0.0.1",
    "shared 100.64.0.0/10": "100.64.0.1",
}


@pytest.mark.parametrize("address", NOT_PUBLIC_BY_RFC.values(), ids=NOT_PUBLIC_BY_RFC.keys())
def test_ranges_that_no_public_host_uses_are_not_public(address: str) -> None:
    assert is_public_address(address) is False


@pytest.mark.parametrize(
    ("address", "public"),
    [("2606:4700::1111", True), ("1.1.1.1", True), ("2001:4860::8888", True), ("fc00::1", False)],
)
def test_the_neighbours_of_those_ranges_are_judged_as_before(address: str, public: bool) -> None:
    assert is_public_address(address) is public
