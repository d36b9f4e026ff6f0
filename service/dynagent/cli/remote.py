"""Commands that talk to a running service: agents, invoke, promote, rollback, rollout.

One HTTP request each, made with the standard library's ``http.client``: a command that
waits for one answer needs no event loop, and importing aiohttp cost more than the call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:8090"


def add_commands(commands: Any) -> None:
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
    up.add_argument(
        "--force",
        action="store_true",
        help="promote a gated canary without a passing evaluation record (recorded with "
        "who forced it)",
    )
    _client_options(up)
    _json_option(up)
    up.set_defaults(func=promote)

    back = commands.add_parser("rollback", help="restore an earlier revision of an agent")
    back.add_argument("name")
    back.add_argument("--to", metavar="REVISION", help="default: the previous stable revision")
    _client_options(back)
    _json_option(back)
    back.set_defaults(func=rollback)

    _rollout_parser(commands)


def _request(
    args: argparse.Namespace, method: str, path: str, body: Any = None
) -> tuple[int, bytes]:
    """The service's status and answer to one request."""
    import http.client  # here: ``--help`` and the other commands do not need it

    url = urlsplit(args.url.rstrip("/") + path)
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    headers = {"Accept": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    target = url.path + (f"?{url.query}" if url.query else "")
    connection = kind(url.netloc, timeout=args.timeout)
    try:
        connection.request(method, target, body=data, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _call(
    args: argparse.Namespace,
    method: str,
    path: str,
    body: Any = None,
    line: Callable[[dict[str, Any]], str] | None = None,
) -> int:
    """Print the answer (as JSON, or the one line ``line`` makes of a success); 0 when the
    service said yes, 1 when it said no, 3 when nothing (or not the service) answered."""
    import http.client

    try:
        status, raw = _request(args, method, path, body)
    except (OSError, http.client.HTTPException) as exc:  # refused, unreachable, timed out
        print(f"error: cannot reach the service at {args.url}: {exc}", file=sys.stderr)
        return 3
    try:
        data = json.loads(raw or b"null")
    except ValueError:
        print(
            f"error: {args.url} answered HTTP {status} without JSON: is it Dynagent?",
            file=sys.stderr,
        )
        return 3
    if line is None or getattr(args, "json", False):
        print(json.dumps(data, indent=2, ensure_ascii=False))
    elif status < 400:
        print(line(data))
    else:
        error = data.get("error", {}) if isinstance(data, dict) else {}
        print(f"error: {error.get('message', data)} ({error.get('type', status)})", file=sys.stderr)
    return 0 if status < 400 else 1


def agents(args: argparse.Namespace) -> int:
    return _call(args, "GET", "/v1/agents")


def invoke(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"input": args.text}
    if args.session:
        body["session_id"] = args.session
    if args.var:
        body["variables"] = dict(v.split("=", 1) for v in args.var)
    return _call(args, "POST", f"/v1/agents/{args.name}/invoke", body)


def promote(args: argparse.Namespace) -> int:
    body = {"force": True} if args.force else None
    return _call(args, "POST", f"/v1/agents/{args.name}/promote", body, line=_promoted)


def rollback(args: argparse.Namespace) -> int:
    body = {"to": args.to} if args.to else {}
    return _call(args, "POST", f"/v1/agents/{args.name}/rollback", body, line=_rolled_back)


def _promoted(status: dict[str, Any]) -> str:
    return f"{status['name']}: promoted; stable is revision {status['revision']}{_canary(status)}"


def _rolled_back(status: dict[str, Any]) -> str:
    return (
        f"{status['name']}: rolled back; stable is revision {status['revision']}{_canary(status)}"
    )


def _canary(status: dict[str, Any]) -> str:
    canary = status.get("canary")
    if not canary:
        return ", no canary"
    return f", canary {canary['revision']} at {canary['weight']:g}% ({canary['state']})"


def rollout(args: argparse.Namespace) -> int:
    if args.reason and args.action != "pause":
        print("error: --reason goes with pause only", file=sys.stderr)
        return 2
    body = {"reason": args.reason} if args.reason else None
    return _call(args, "POST", f"/v1/agents/{args.name}/rollout/{args.action}", body)


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
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the answer (default 60)"
    )


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the agent's whole status")
