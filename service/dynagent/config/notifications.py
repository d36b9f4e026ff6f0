"""The service config's sections for the outside world: rollout notices sent to
webhooks, and the stdio MCP servers the service may start."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

from pydantic import Field

from dynagent.config._sections import Section as _Section


class McpServerConfig(_Section):
    """A stdio MCP server the service may start; specs name it (``server: NAME``)."""

    command: str = Field(min_length=1)
    """The program; ``python`` is the interpreter running Dynagent (it has the mcp SDK)."""
    args: list[str] = []
    env: dict[str, str] = {}
    """Extra environment of the server process (``${VAR}`` allowed)."""
    cwd: Path | None = None
    """Working directory; relative to this file; default: this file's folder."""


NoticeEvent = Literal["published", "gate", "step", "pause", "resume", "promote", "rollback"]
NOTICE_EVENTS: tuple[NoticeEvent, ...] = get_args(NoticeEvent)
"""What a webhook can be told (docs/canary.md, Webhooks)."""


class WebhookConfig(_Section):
    """One receiver of rollout notices: a signed JSON POST per notice."""

    url: str = Field(min_length=1, max_length=2000, pattern=r"^https?://")
    events: list[NoticeEvent] = Field(default_factory=lambda: list(NOTICE_EVENTS), min_length=1)
    secret_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    """The variable holding the key bodies are signed with (HMAC-SHA256); none: unsigned."""
    format: Literal["json", "slack"] = "json"
    """``slack``: ``{"text": ...}``, as Slack's incoming webhooks take it."""
    timeout: float = Field(default=5.0, gt=0, le=60)
    max_attempts: int = Field(default=6, ge=1, le=20)
    retry_seconds: float = Field(default=1.0, gt=0, le=300)  # doubles per retry, to 5 min


class NotificationsConfig(_Section):
    webhooks: list[WebhookConfig] = Field(default=[], max_length=20)
    queue: int = Field(default=1000, ge=1, le=100_000)  # per webhook; more are dropped
