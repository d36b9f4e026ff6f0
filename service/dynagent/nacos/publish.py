"""``dynagent publish DIR``: push local agent files and their evaluation suites into
Nacos, to bootstrap a namespace (e.g. from ``config-samples/``). Every file is
validated first; nothing is published when one is invalid."""

from __future__ import annotations

import sys
from pathlib import Path

from dynagent.config import ServiceConfig
from dynagent.evals.spec import is_suite_key, load_suite, suite_agent
from dynagent.exceptions import ConfigError
from dynagent.nacos.client import NacosClient, NacosError
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import is_canary_key
from dynagent.sources.files import is_agent_file, load_agent_file
from dynagent.spec.agent import format_of


def _documents(directory: Path, config: ServiceConfig) -> list[tuple[str, str, str]]:
    """(dataId, text, type) for every agent file. Each is checked as the service with
    ``config`` would build it (tools and interceptors included, the stdio MCP servers it
    names declared); raises ``ConfigError`` on the first bad one."""
    builder = AgentBuilder(offline=True, features=(config,))
    found: list[tuple[str, str, str]] = []
    for path in sorted(directory.iterdir()):
        if not (path.is_file() and is_agent_file(path)):
            continue
        fmt = format_of(path.name)
        if is_suite_key(path.name):  # an agent's evaluation suite, published beside it
            name = suite_agent(path.name)
            text = path.read_text(encoding="utf-8")
            load_suite(text, fmt=fmt, source=str(path), agent=name)
            found.append((f"{name}.evals.{'json' if fmt == 'json' else 'yaml'}", text, fmt))
            continue
        spec = load_agent_file(path)
        builder.build(spec)
        kind = "canary" if is_canary_key(path.name) else "agent"
        data_id = f"{spec.name}.{kind}.{'json' if fmt == 'json' else 'yaml'}"
        found.append((data_id, path.read_text(encoding="utf-8"), fmt))
    return found


async def publish_directory(directory: Path, config: ServiceConfig) -> int:
    settings = config.nacos
    try:
        documents = _documents(directory, config)
    except ConfigError as exc:
        print(f"not published: {exc}", file=sys.stderr)
        return 1
    client = NacosClient(settings)
    published = 0
    try:
        await client.connect()
        for data_id, text, fmt in documents:
            await client.publish(data_id, settings.group, text, fmt)
            published += 1
            print(f"published {settings.namespace or 'public'}/{settings.group}/{data_id}")
    except NacosError as exc:
        done = (
            f"{published} of {len(documents)} published" if published else "nothing was published"
        )
        print(f"error: {exc}; {done}", file=sys.stderr)
        return 3
    finally:
        await client.close()
    return 0
