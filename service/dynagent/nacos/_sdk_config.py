"""The Nacos SDK's client settings, shared by every SDK client Dynagent makes (config,
and the MCP registry's AI service)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from v2.nacos import ClientConfigBuilder

from dynagent.config import NacosConfig

CONNECT_TIMEOUT = 5.0


def sdk_config(settings: NacosConfig, work_dir: Path) -> Any:
    """The SDK's client settings (a ``ClientConfigBuilder``) for ``settings``: its cache and
    logs under ``work_dir``, the connect timeout, and the credentials when given."""
    builder = (
        ClientConfigBuilder()
        .server_address(settings.server_addr)
        .namespace_id(settings.namespace)
        .cache_dir(str(work_dir / "cache"))
        .log_dir(str(work_dir / "logs"))
        .log_level(logging.WARNING)
        .timeout_ms(int(CONNECT_TIMEOUT * 1000))
    )
    if settings.username:
        builder = builder.username(settings.username).password(settings.password)
    return builder
