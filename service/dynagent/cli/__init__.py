"""The ``dynagent`` command: serve, health, validate, schema, publish, mcp, agents, invoke,
promote, rollback, rollout, eval. Each command module (and each feature package's ``cli``)
adds its own subcommands.

A command module imports at its top only what building the parser needs (``argparse``,
the standard library); what a command runs with (the service, openai, the MCP and Nacos
SDKs, aiohttp, loguru) is imported in the command's function. ``dynagent --help`` then
answers in a fraction of a second instead of the seconds those imports take
(``tests/service/test_cli_start.py`` keeps them out).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dynagent.cli import evals, health, local, remote, serve
from dynagent.exceptions import ConfigError, StartupError
from dynagent.mcp import cli as mcp_cli
from dynagent.nacos import cli as nacos_cli

COMMANDS = (serve, health, nacos_cli, local, mcp_cli, remote, evals)
"""Where the subcommands come from, in the order ``--help`` lists them."""


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="dynagent", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_commands(commands)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except StartupError as exc:
        from loguru import logger  # configured by ``serve``, which raised it

        logger.error("{}", exc.message)
        return 2
    return code
