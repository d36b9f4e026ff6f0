"""Commands that talk to a running service: agents, invoke, promote, rollback, rollout."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import Any

import aiohttp

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
    _client_options(up)
    up.set_defaults(func=promote)

    back = commands.add_parser("rollback", help="restore an earlier revision of an agent")
    back.add_argument("name")
    back.add_argument("--to", metavar="REVISION", help="default: the previous stable revision")
    _client_options(back)
    back.set_defaults(func=rollback)

    _rollout_parser(commands)


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
