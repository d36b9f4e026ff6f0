"""The ``dynagent`` command: serve, validate, schema, agents, invoke."""

from __future__ import annotations

import argparse
import asyncio
import errno
import gc
import ipaddress
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from loguru import logger

from ._compat import check_all as check_dependencies
from .builder import AgentBuilder
from .config import ServiceConfig, load_config
from .exceptions import ConfigError, StartupError
from .http.app import create_app
from .http.auth import ApiKeys
from .logs import configure_logging
from .sources.files import load_agent_file
from .spec import json_schema

DEFAULT_URL = "http://127.0.0.1:8090"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve_config(args: argparse.Namespace) -> ServiceConfig:
    config = _nacos_config(args)
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
    web.run_app(
        app,
        sock=listening,
        shutdown_timeout=config.listen.drain_seconds,
        access_log=None,
        print=lambda _: _serving(config.listen.host, config.listen.port),
    )
    return 0


def _serving(host: str, port: int) -> None:
    """Started: every source loaded, the port open."""
    # What startup built (modules, schemas, agents: ~200,000 objects) lives as long as the
    # process. Frozen out of the garbage collector, they are no longer walked by each full
    # collection, which took 30-400 ms in the middle of requests: the p99 tail under load.
    gc.collect()
    gc.freeze()
    logger.info("listening on http://{}:{}", host, port)


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


def validate(args: argparse.Namespace) -> int:
    failed = 0
    builder = AgentBuilder(offline=True)
    for path in args.files:
        try:
            spec = load_agent_file(path)
            builder.build(spec)
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{path}: cannot read: {exc}", file=sys.stderr)
            failed += 1
        except ConfigError as exc:
            print(f"{path}: {exc.reason}", file=sys.stderr)
            for issue in exc.issues:
                print(f"  {issue}", file=sys.stderr)
            failed += 1
        else:
            print(f"{path}: ok ({spec.name}, revision {spec.revision})")
    return 1 if failed else 0


def publish(args: argparse.Namespace) -> int:
    from .publish import publish_directory

    config = _nacos_config(args)
    return asyncio.run(publish_directory(args.directory, config.nacos))


def _nacos_config(args: argparse.Namespace) -> ServiceConfig:
    config = load_config(args.config)
    if args.nacos is not None:
        config.nacos.server_addr = args.nacos
    if args.namespace is not None:
        config.nacos.namespace = args.namespace
    if args.group is not None:
        config.nacos.group = args.group
    return config


def mcp_list(args: argparse.Namespace) -> int:
    from .cli_mcp import list_servers

    config = _nacos_config(args)
    return asyncio.run(list_servers(config.nacos, args.agents, args.json))


def schema(args: argparse.Namespace) -> int:
    print(json.dumps(json_schema(), indent=2))
    return 0


async def _call(args: argparse.Namespace, method: str, path: str, body: Any = None) -> int:
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, args.url.rstrip("/") + path, json=body, headers=headers) as resp,
    ):
        data = await resp.json(content_type=None)
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0 if resp.status < 400 else 1


def agents(args: argparse.Namespace) -> int:
    return asyncio.run(_call(args, "GET", "/v1/agents"))


def invoke(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"input": args.text}
    if args.session:
        body["session_id"] = args.session
    if args.var:
        body["variables"] = dict(v.split("=", 1) for v in args.var)
    return asyncio.run(_call(args, "POST", f"/v1/agents/{args.name}/invoke", body))


def _nacos_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nacos", metavar="HOST:PORT", help="serve every agent in a Nacos group")
    parser.add_argument("--namespace", help="Nacos namespace id (default: public)")
    parser.add_argument("--group", help="Nacos group (default: AGENTS)")


def promote(args: argparse.Namespace) -> int:
    return asyncio.run(_call(args, "POST", f"/v1/agents/{args.name}/promote"))


def rollback(args: argparse.Namespace) -> int:
    body = {"to": args.to} if args.to else {}
    return asyncio.run(_call(args, "POST", f"/v1/agents/{args.name}/rollback", body))


def rollout(args: argparse.Namespace) -> int:
    if args.reason and args.action != "pause":
        print("error: --reason goes with pause only", file=sys.stderr)
        return 2
    body = {"reason": args.reason} if args.reason else None
    return asyncio.run(_call(args, "POST", f"/v1/agents/{args.name}/rollout/{args.action}", body))


def _rollout_parser(commands: Any) -> None:
    steer = commands.add_parser("rollout", help="steer an agent's canary rollout")
    steer.add_argument(
        "action",
        choices=["pause", "resume"],
        help="pause: take the canary out of traffic on every replica; resume: put it back",
    )
    steer.add_argument("name")
    steer.add_argument("--reason", help="pause only: why (recorded in rollout.paused.reason)")
    _client_options(steer)
    steer.set_defaults(func=rollout)


def _client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default=os.environ.get("DYNAGENT_URL", DEFAULT_URL))
    parser.add_argument(
        "--api-key", default=os.environ.get("DYNAGENT_API_KEY"), help="default: $DYNAGENT_API_KEY"
    )


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="dynagent", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    run = commands.add_parser("serve", help="run the service")
    run.add_argument("--config", type=Path, help="service config (YAML)")
    run.add_argument("--agents", type=Path, help="folder of agent files (default factory)")
    run.add_argument("--host")
    run.add_argument("--port", type=int)
    run.add_argument("--insecure", action="store_true", help="allow non-loopback with auth off")
    _nacos_options(run)
    run.set_defaults(func=serve)

    push = commands.add_parser("publish", help="publish agent files (and prompts) to Nacos")
    push.add_argument("directory", type=Path)
    push.add_argument("--config", type=Path, help="service config (YAML) for Nacos settings")
    _nacos_options(push)
    push.set_defaults(func=publish)

    check = commands.add_parser("validate", help="check agent files")
    check.add_argument("files", nargs="+", type=Path)
    check.set_defaults(func=validate)

    commands.add_parser("schema", help="print the AgentSpec JSON Schema").set_defaults(func=schema)

    mcp = commands.add_parser("mcp", help="MCP servers").add_subparsers(dest="mcp", required=True)
    servers = mcp.add_parser("list", help="the Nacos MCP registry's servers and their agents")
    servers.add_argument("--config", type=Path, help="service config (YAML) for Nacos settings")
    servers.add_argument("--agents", type=Path, help="also count the agent files in this folder")
    servers.add_argument("--json", action="store_true", help="print JSON")
    _nacos_options(servers)
    servers.set_defaults(func=mcp_list)

    listing = commands.add_parser("agents", help="list the agents of a running service")
    _client_options(listing)
    listing.set_defaults(func=agents)

    call = commands.add_parser("invoke", help="invoke an agent of a running service")
    call.add_argument("name")
    call.add_argument("text")
    call.add_argument("--session")
    call.add_argument("--var", action="append", help="prompt variable NAME=VALUE")
    _client_options(call)
    call.set_defaults(func=invoke)

    up = commands.add_parser("promote", help="make an agent's canary its stable version")
    up.add_argument("name")
    _client_options(up)
    up.set_defaults(func=promote)

    back = commands.add_parser("rollback", help="restore an earlier revision of an agent")
    back.add_argument("name")
    back.add_argument("--to", metavar="REVISION", help="default: the previous stable revision")
    _client_options(back)
    back.set_defaults(func=rollback)

    _rollout_parser(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        logger.error("{}", exc.message)
        return 2
    except aiohttp.ClientError as exc:
        print(f"error: cannot reach the service at {args.url}: {exc}", file=sys.stderr)
        return 3
    return code
