"""``dynagent mcp list --nacos HOST:PORT``: the servers of the Nacos MCP registry, and
the agents (in the Nacos agent group, and in ``--agents DIR``) that use each."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynagent.exceptions import ConfigError
from dynagent.nacos.cli import nacos_config, nacos_options

if TYPE_CHECKING:
    from dynagent.config import NacosConfig
    from dynagent.nacos.client import NacosClient
    from dynagent.spec.agent import AgentSpec

# The Nacos SDK, the MCP entry and the spec are imported by the functions that use them:
# building the ``dynagent`` parser must not import them (see ``dynagent.cli``).


def add_commands(commands: Any) -> None:
    mcp = commands.add_parser("mcp", help="MCP servers").add_subparsers(dest="mcp", required=True)
    servers = mcp.add_parser("list", help="the Nacos MCP registry's servers and their agents")
    servers.add_argument("--config", type=Path, help="service config (YAML) for Nacos settings")
    servers.add_argument("--agents", type=Path, help="also count the agent files in this folder")
    servers.add_argument("--json", action="store_true", help="print JSON")
    nacos_options(servers)
    servers.set_defaults(func=mcp_list)


def mcp_list(args: argparse.Namespace) -> int:
    import asyncio

    config = nacos_config(args)
    return asyncio.run(list_servers(config.nacos, args.agents, args.json))


def registry_users(specs: list[AgentSpec]) -> dict[str, set[str]]:
    """Registry server name → the agents whose tools name it."""
    from dynagent.mcp.entry import McpToolSpec

    users: dict[str, set[str]] = {}
    for spec in specs:
        for entry in spec.tools:
            if isinstance(entry, McpToolSpec) and entry.nacos is not None:
                users.setdefault(entry.nacos.server, set()).add(spec.name)
    return users


async def _nacos_specs(client: NacosClient, group: str) -> list[AgentSpec]:
    from dynagent.spec.agent import load_spec

    specs = []
    for data_id in sorted(await client.list_group(group)):
        if not data_id.endswith((".agent.yaml", ".agent.yml", ".agent.json")):
            continue
        text = await client.get(data_id, group)
        if text is None:
            continue
        try:
            specs.append(load_spec(text, fmt="json" if data_id.endswith(".json") else "yaml"))
        except ConfigError:
            continue  # a broken definition uses nothing; `dynagent validate` says why
    return specs


def _local_specs(directory: Path | None) -> list[AgentSpec]:
    from dynagent.sources.files import is_agent_file, load_agent_file

    if directory is None:
        return []
    specs = []
    for path in sorted(directory.iterdir()):
        if path.is_file() and is_agent_file(path):
            try:
                specs.append(load_agent_file(path))
            except (ConfigError, OSError):
                continue
    return specs


async def list_servers(settings: NacosConfig, agents: Path | None, as_json: bool) -> int:
    from dynagent.nacos.client import NacosClient, NacosUnavailable

    client = NacosClient(settings)
    try:
        await client.connect()
        servers = await client.list_mcp_servers()
        specs = [*await _nacos_specs(client, settings.group), *_local_specs(agents)]
    except NacosUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    finally:
        await client.close()
    users = registry_users(specs)
    rows = [_row(server, users) for server in servers]
    if as_json:
        print(json.dumps({"servers": rows}, indent=2))
        return 0
    print(f"{'NAME':<28} {'VERSION':<10} {'PROTOCOL':<16} {'ENABLED':<8} AGENTS")
    for row in rows:
        agents_text = ", ".join(row["agents"]) or "-"
        print(
            f"{row['name']:<28} {row['version']:<10} {row['protocol']:<16} "
            f"{'yes' if row['enabled'] else 'no':<8} {agents_text}"
        )
    return 0


def _row(server: dict[str, Any], users: dict[str, set[str]]) -> dict[str, Any]:
    name = str(server.get("name") or "")
    detail = server.get("versionDetail") or {}
    return {
        "name": name,
        "version": str(detail.get("version") or server.get("version") or ""),
        "protocol": str(server.get("frontProtocol") or server.get("protocol") or ""),
        "enabled": server.get("enabled") is not False,
        "agents": sorted(users.get(name, ())),
    }
