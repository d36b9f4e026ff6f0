"""``dynagent serve``: run the service until it is stopped."""

from __future__ import annotations

import argparse
import errno
import gc
import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynagent.cli.health import config_path
from dynagent.exceptions import StartupError
from dynagent.nacos.cli import nacos_config, nacos_options

if TYPE_CHECKING:
    from dynagent.config import ServiceConfig


def add_commands(commands: Any) -> None:
    run = commands.add_parser("serve", help="run the service")
    run.add_argument(
        "--config", type=Path, default=config_path(), help="service config (YAML; DYNAGENT_CONFIG)"
    )
    run.add_argument("--agents", type=Path, help="folder of agent files (default factory)")
    run.add_argument("--host")
    run.add_argument("--port", type=int)
    run.add_argument("--insecure", action="store_true", help="allow non-loopback with auth off")
    nacos_options(run)
    run.set_defaults(func=serve)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve_config(args: argparse.Namespace) -> ServiceConfig:
    config = nacos_config(args)
    if args.nacos is not None:
        config.factories.nacos = True
    if args.agents is not None:
        config.factories.default.directory = args.agents.resolve()
    if args.host is not None:
        config.listen.host = args.host
    if args.port is not None:
        config.listen.port = args.port
    if args.insecure:
        config.insecure = True
    return config


def serve(args: argparse.Namespace) -> int:
    # The service, imported when it is served (see the ``dynagent.cli`` docstring).
    from loguru import logger

    from dynagent._compat import check_all as check_dependencies
    from dynagent.core.auth import ApiKeys
    from dynagent.http.app import create_app
    from dynagent.http.serving import run
    from dynagent.logs import configure_logging

    check_dependencies()  # an untested version of a dependency: one line, before anything
    config = _serve_config(args)
    mask = configure_logging(config.logging.level, json_lines=config.logging.json_lines)
    keys = ApiKeys.from_config(os.environ, config.auth)
    mask.add([*keys.secrets, config.nacos.password, os.environ.get("OPENAI_API_KEY", "")])
    if not keys.enabled:
        if not _is_loopback(config.listen.host) and not config.insecure:
            logger.error(
                "refusing to listen on {} with auth off: set {} (or auth.keys_file), "
                "or pass --insecure",
                config.listen.host,
                config.auth.keys_env,
            )
            return 2
        logger.warning("auth is OFF: any caller can use every agent (set {})", config.auth.keys_env)
    # Bound before the app starts: a port in use is one line, before any source loads.
    listening = _listen_socket(config.listen.host, config.listen.port)
    app = create_app(config, secrets=mask)
    run(app, listening, lambda: _serving(config.listen.host, config.listen.port))
    return 0


YOUNG_COLLECTION_AT = 10_000
"""Allocations past deallocations that start a collection of the youngest generation
(Python's default: 700). A request allocates and frees a few hundred objects; with
requests interleaved, that count wanders past 700 every few requests though nothing is
kept, and each of those collections, with the older ones they bring on, walks every
request in flight: some 20 µs a request, a twentieth of the service's CPU. At 10,000 it
is reached by garbage that only the collector can free (cycles), which it still frees."""


def _serving(host: str, port: int) -> None:
    """Started: every source loaded, the port open."""
    # What startup built (modules, schemas, agents: ~200,000 objects) lives as long as the
    # process. Frozen out of the garbage collector, they are no longer walked by each full
    # collection, which took 30-400 ms in the middle of requests: the p99 tail under load.
    import asyncio

    from loguru import logger

    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_AT, *gc.get_threshold()[1:])
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]  # uvloop or asyncio
    logger.info("listening on http://{}:{} (event loop: {})", host, port, loop)


def _listen_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (``StartupError`` in one line if it cannot be)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as exc:
        listening.close()
        reason = "the port is already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
        raise StartupError(
            f"cannot listen on {host}:{port}: {reason}; stop the other process or pick "
            "another port (--port, listen.port)"
        ) from None
    return listening
