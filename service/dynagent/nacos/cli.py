"""``dynagent publish``, and the Nacos flags other commands share."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dynagent.config import ServiceConfig


def add_commands(commands: Any) -> None:
    push = commands.add_parser("publish", help="publish agent files (and prompts) to Nacos")
    push.add_argument("directory", type=Path)
    push.add_argument(
        "--config",
        type=Path,
        help="config of the service that will serve them (YAML): Nacos settings, MCP servers",
    )
    nacos_options(push)
    push.set_defaults(func=publish)


def nacos_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nacos", metavar="HOST:PORT", help="serve every agent in a Nacos group")
    parser.add_argument("--namespace", help="Nacos namespace id (default: public)")
    parser.add_argument("--group", help="Nacos group (default: AGENTS)")


def publish(args: argparse.Namespace) -> int:
    import asyncio

    from dynagent.nacos.publish import publish_directory

    config = nacos_config(args)
    return asyncio.run(publish_directory(args.directory, config))


def nacos_config(args: argparse.Namespace) -> ServiceConfig:
    from dynagent.config import load_config  # not for ``--help``

    config = load_config(args.config)
    if args.nacos is not None:
        config.nacos.server_addr = args.nacos
    if args.namespace is not None:
        config.nacos.namespace = args.namespace
    if args.group is not None:
        config.nacos.group = args.group
    return config
