"""nacos-sdk-python's internals, which its public ``NacosConfigService`` does not offer.

The SDK reads, writes and listens to one config at a time. What Dynagent needs beyond
that goes through the gRPC client under the service (``service.grpc_client_proxy``) and
the SDK's own tables, here and nowhere else:

- ``GrpcUtils.remote_type``: the table of wire types the SDK parses server messages into,
  one for the whole process; ``register_wire_types`` adds to it (the fuzzy watch's
  pushes, a query answer that keeps the gray markers);
- the proxy's ``start()``, ``fetch_rpc_client()`` and ``request_config_server()``: a
  config read with its md5 and gray marker, which ``get_config`` drops;
- the proxy's listen task, which waits up to 5 s on ``execute_config_listen_channel``
  between two rounds and stops on ``stop_event``: woken at once, so that a listener is
  announced (and a client shut down) without waiting out that tick;
- ``get_config_cache_key``: the name of the file its local cache keeps a config in;
- the ``RpcClient``'s ``register_server_request_handler``, ``register_connection_listener``
  and ``request``: requests and pushes the SDK has no API for (Nacos 3 fuzzy watch).

The SDK's log lines are its own too: ``read_file`` warns ``File not found: {path}`` for
every local copy of a config it looks for and lacks (``AbsentLocalCopies`` drops those).

The SDK itself is imported only when one of these is used.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from dynagent._compat.versions import Tested

TESTED = Tested("nacos-sdk-python", "3.2.0", "3.3")
PRIVATE_PARTS = (
    "v2.nacos.transport.grpc_util:GrpcUtils.remote_type",
    "v2.nacos.config.remote.config_grpc_client_proxy:ConfigGRPCClientProxy.start",
    "v2.nacos.config.remote.config_grpc_client_proxy:ConfigGRPCClientProxy.fetch_rpc_client",
    "v2.nacos.config.remote.config_grpc_client_proxy:ConfigGRPCClientProxy.request_config_server",
    "v2.nacos.transport.rpc_client:RpcClient.register_server_request_handler",
    "v2.nacos.transport.rpc_client:RpcClient.register_connection_listener",
    "v2.nacos.transport.rpc_client:RpcClient.request",
    "v2.nacos.config.util.config_client_util:get_config_cache_key",
)
"""What this module reaches, as ``module:attribute``; the attributes each client makes
for itself (``grpc_client_proxy``, ``execute_config_listen_channel``, ``stop_event``)
are checked on a client by ``tests/runtime/test_compat.py``."""


def check() -> None:
    TESTED.check()


ABSENT_FILE = "File not found: "
"""How the SDK's ``read_file`` starts its warning for a file that does not exist."""
CACHE_KEY_SEPARATOR = "@@"
"""Between dataId, group and namespace in the name of the SDK's local copy of a config."""


class AbsentLocalCopies(logging.Filter):
    """Drops the SDK's warning that a config has no local copy yet.

    Before it listens to a config the SDK reads its snapshot (``{dataId}@@{group}@@{ns}`` in
    its cache folder), and before a read its failover file (the same name plus
    ``_failover``); it warns when the file is absent. A fresh cache (each client has one)
    has none, so every start printed one warning per agent; no file is what Dynagent
    expects, since the snapshot it keeps is its own. Other SDK lines pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        message = record.getMessage()
        return not (message.startswith(ABSENT_FILE) and CACHE_KEY_SEPARATOR in message)


ABSENT_LOCAL_COPIES = AbsentLocalCopies()


def register_wire_types(types: Mapping[str, type[Any]]) -> None:
    """Have every SDK client of the process parse these wire types into these classes."""
    from v2.nacos.transport.grpc_util import GrpcUtils

    GrpcUtils.remote_type.update(types)


async def start(service: Any) -> None:
    """Open the gRPC connection of a ``NacosConfigService``."""
    await service.grpc_client_proxy.start()


async def rpc_client(service: Any) -> Any:
    """The ``RpcClient`` under a ``NacosConfigService`` (its connection to the server)."""
    return await service.grpc_client_proxy.fetch_rpc_client()


async def request_config(service: Any, request: Any, response_class: type[Any]) -> Any:
    """Send a config request as the SDK sends its own (headers, credentials) and return
    the answer, a ``response_class``; the SDK's ``NacosException`` when refused."""
    proxy = service.grpc_client_proxy
    client = await proxy.fetch_rpc_client()
    return await proxy.request_config_server(client, request, response_class)


async def send(client: Any, request: Any, timeout_ms: int) -> Any:
    """Send ``request`` on an ``RpcClient`` and return the server's answer."""
    return await client.request(request, timeout_ms)


async def serve_pushes(client: Any, request_types: Iterable[str], handler: Any) -> None:
    """Hand the server's pushes of ``request_types`` to ``handler.request_reply`` and tell
    it of every (re)connection (``handler.on_connected``); the SDK keeps one handler per
    type and client."""
    for kind in request_types:
        await client.register_server_request_handler(kind, handler)
    await client.register_connection_listener(handler)


def wake_listen_task(service: Any) -> None:
    """Run the SDK's listen task now rather than at its next 5-second tick: it sends
    the listeners added since, or notices a shutdown (a ``None`` in its queue wakes it)."""
    channel: asyncio.Queue[Any] = service.grpc_client_proxy.execute_config_listen_channel
    if channel.empty():
        channel.put_nowait(None)


def stop_listen_task(service: Any) -> None:
    """Tell the SDK's listen task to end, and wake it, so that ``service.shutdown()``
    does not wait up to 5 s for its tick."""
    service.grpc_client_proxy.stop_event.set()
    wake_listen_task(service)


def cache_file_name(data_id: str, group: str, tenant: str) -> str:
    """The file name the SDK's local config cache gives a config (``{dataId}@@{group}@@
    {tenant}``): written each time it fetches a change of a config listened to, and when
    that write fails its listen task retries at once, round after round."""
    from v2.nacos.config.util.config_client_util import get_config_cache_key

    name: str = get_config_cache_key(data_id, group, tenant)
    return name
