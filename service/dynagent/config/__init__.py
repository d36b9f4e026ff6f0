"""The service configuration: a YAML file, ``${VAR}`` from the environment, then
``DYNAGENT_*`` environment overrides. Secrets never sit in the file itself."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import AliasChoices, ConfigDict, Field, ValidationError, field_validator

from dynagent import _regex
from dynagent.config._sections import Section as _Section
from dynagent.config.models import ModelsConfig, Price
from dynagent.config.notifications import (
    NOTICE_EVENTS,
    McpServerConfig,
    NoticeEvent,
    NotificationsConfig,
    WebhookConfig,
)
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.sessions.base import DEFAULT_HISTORY_BYTES, DEFAULT_SESSION_TTL
from dynagent.sessions.redis_url import check_url
from dynagent.spec._templates import MissingVariable, expand_env
from dynagent.spec.agent import issues_from
from dynagent.spec.tools import OutboundFields

__all__ = [
    "NOTICE_EVENTS",
    "McpServerConfig",
    "ModelsConfig",
    "NoticeEvent",
    "NotificationsConfig",
    "Price",
    "ServiceConfig",
    "WebhookConfig",
    "load_config",
]


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Larger request bodies get 413."""
    lame_duck_seconds: float = Field(default=0, ge=0)
    """On SIGTERM, how long the service goes on accepting and serving requests, with
    ``/readyz`` answering 503 and every response closing its connection, before it closes
    its port. Behind a balancer that only learns from readiness probes or refused
    connections (nginx without active health checks), a few seconds let it stop sending
    and let the kept-alive connections it holds be used up, instead of being closed under
    a request it has just sent. ``drain_seconds`` starts when the port closes."""
    drain_seconds: float = Field(default=30, ge=0)
    """On SIGTERM, once the port is closed, how long running requests may take to finish."""
    max_watch_streams: int = Field(default=128, ge=1)
    """Open ``GET /v1/watch/agents`` streams on this replica; more get 429."""
    max_watch_streams_per_key: int = Field(default=8, ge=1)
    """Open watch streams of one API key (a page per tab); more get 429."""
    event_loop: Literal["asyncio", "uvloop"] = "asyncio"
    """The event loop ``dynagent serve`` runs on: ``asyncio`` (the standard library's), or
    ``uvloop`` (libuv, its transports in C: 3-8 % less CPU per request; not on Windows).
    uvloop is not the default: libuv reads a socket up to 32 times per loop turn, and a
    client without flow control (the MCP SDK's HTTP client, on anyio) then buffers about
    4 MB of an oversized tool result before it is cut, where asyncio's loop lets it buffer
    under 2 MB."""


class DefaultFactoryConfig(_Section):
    directory: Path | None = None
    """Folder of agent files, watched for changes."""


class NacosConfig(_Section):
    server_addr: str = "127.0.0.1:8848"
    """The server, or every node of a cluster: ``h1:8848,h2:8848`` or a YAML list of
    ``host:port`` (each may also be ``http://host:port``). Kept as the comma-separated
    text the Nacos client takes; the client fails over between the nodes."""
    namespace: str = ""
    group: str = "AGENTS"
    username: str = ""
    password: str = ""
    snapshot_dir: Path = Path("var/nacos-snapshot")
    """Dynagent's own last-good copy of every document, used when Nacos is down at start."""
    poll_seconds: float = Field(default=30.0, gt=0, le=300)
    """How often the group is listed, as a safety net: new, changed and deleted dataIds
    are pushed (fuzzy watch). On a server without fuzzy watch the list runs at least
    every 2 s, since it is then the only way to find new agents."""
    delete_grace_seconds: float = Field(default=0.0, ge=0, le=3600)
    """How long an agent whose config was deleted keeps serving (0: removed at once)."""
    prompt_group: str = "PROMPTS"
    """Group of plain-config prompts, for servers without the prompt registry."""
    gray_tag: str = Field(default="", max_length=128, pattern=r"^[A-Za-z0-9_.:-]*$")
    """This instance's gray tag: a config with a tag gray (``tag=`` on publish) under this
    tag is served in its gray version here, the formal one elsewhere. Sent as the
    connection label ``Vipserver-Tag``, which Nacos's tag rules match."""

    @field_validator("server_addr", mode="before")
    @classmethod
    def _addresses(cls, value: Any) -> Any:
        entries = value if isinstance(value, list) else [value]
        if not all(isinstance(entry, str) for entry in entries):
            return value  # left to the type check
        addresses = [a.strip() for entry in entries for a in entry.split(",")]
        if not addresses:
            raise ValueError("name at least one Nacos node (host:port)")
        for address in addresses:
            if not _is_address(address):
                raise ValueError(
                    f"{address!r} is not a Nacos address: give host:port (or "
                    "http://host:port) for each node, comma-separated or as a list"
                )
        return ",".join(addresses)

    @property
    def addresses(self) -> tuple[str, ...]:
        """Every node of ``server_addr``."""
        return tuple(self.server_addr.split(","))


def _is_address(address: str) -> bool:
    """``host:port`` or ``http(s)://host:port``, without spaces or a path (the Nacos
    client adds 1000 to the port for gRPC, so a missing port is no default)."""
    for scheme in ("http://", "https://"):
        address = address.removeprefix(scheme)
    host, _, port = address.rpartition(":")
    if not (port.isdigit() and 0 < int(port) < 65536):
        return False
    return bool(host) and not any(c.isspace() or c in "/?#@,:" for c in host)


class SpringAiAlibabaConfig(_Section, OutboundFields):
    """The Spring AI Alibaba layout factory. Its documents have no network fields, so the
    MCP servers and partner agents they name are reached as these say (``allow_private``
    for servers on internal addresses; by default public addresses only)."""


class FactoriesConfig(_Section):
    default: DefaultFactoryConfig = DefaultFactoryConfig()
    nacos: bool = False
    """Serve every agent in ``nacos.group`` (full-agent factory)."""
    nacos_prompt: DefaultFactoryConfig | None = None
    """Local specs whose ``prompt.ref`` points into Nacos (prompt-only factory)."""
    spring_ai_alibaba: bool | SpringAiAlibabaConfig = False
    """Serve every Spring AI Alibaba agent of the namespace (groups ``ai-agent-*``): ``true``,
    or the factory's settings (``allow_hosts``, ``allow_private``)."""


class A2aConfig(_Section):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    register_: bool = Field(default=False, alias="register")
    """Release every agent's A2A card to the Nacos A2A registry (``nacos.server_addr``)
    and register its endpoint; updated on every new revision, deregistered on shutdown."""
    public_url: str = Field(
        default="",
        pattern=r"^(https?://[^/?#]+(/[^?#]*)?)?$",
        validation_alias=AliasChoices("public_url", "url"),
    )
    """The service's address as callers reach it (``https://agents.internal``; ``url``
    is accepted as its older name): agent X's card names ``{public_url}/a2a/X`` as its
    endpoint, and ``register`` registers that. Unset, a card names the address the
    caller's connection reached (never the request's ``Host`` header). Required with
    ``register``."""


class SessionsConfig(_Section):
    store: Literal["sqlite", "memory", "redis"] = "sqlite"
    """``sqlite`` for one machine; ``redis`` when replicas share conversations."""
    path: Path = Path("var/sessions.db")
    url: str = "redis://127.0.0.1:6379/0"
    """The Redis server of ``store: redis`` (``redis://`` or ``rediss://``), or the
    Sentinels that know its primary now:
    ``redis+sentinel://[[user]:password@]host:port[,host:port…]/mymaster[/db]`` (a failover is
    then followed, and every session write waits until a replica has it). A password
    belongs in ``${VAR}``, never in the file."""
    key_prefix: str = "dynagent:session:"
    lock_ttl: float = Field(default=15.0, gt=0, le=600)
    """Seconds a crashed replica's hold on a session outlives it (``store: redis``)."""
    timeout: float = Field(default=2.0, gt=0, le=60)
    """Seconds one session operation may take, retries included (``store: redis``): past
    them Redis is out, runs with a session answer 503 ``unavailable`` at once until it
    answers again, and ``/readyz`` says ``degraded``."""
    max_history_bytes: int = Field(default=DEFAULT_HISTORY_BYTES, ge=1024)
    """A session keeps (and a run is given) its newest whole turns within this many bytes."""
    ttl: float = Field(default=DEFAULT_SESSION_TTL, gt=0, le=366 * 24 * 3600)
    """Seconds a session is kept after its last use (a run that reads or writes it renews
    it); then it is deleted, in every store. With ``max_history_bytes`` this bounds what
    callers can leave behind: a session holds at most that much, for at most this long."""

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str) -> str:
        return check_url(url)


class AuthConfig(_Section):
    keys_env: str = "DYNAGENT_API_KEYS"
    """Environment variable holding comma-separated API keys (access to every agent)."""
    admin_keys_env: str = "DYNAGENT_ADMIN_KEYS"
    """Environment variable holding comma-separated admin keys (may also promote and roll back)."""
    metrics_keys_env: str = "DYNAGENT_METRICS_KEYS"
    """Environment variable holding comma-separated keys that may read ``/metrics`` only."""
    keys_file: Path | None = None
    """YAML file: ``keys: [{name, key, agents?: [...], admin?: bool, metrics?: bool,
    feedback?: bool}]``,
    watched: a change applies within a second."""


class LoggingConfig(_Section):
    level: str = "INFO"
    json_lines: bool = Field(default=False, alias="json")
    """One JSON object per line (for log shippers) instead of text."""


_VARIABLE_PATTERN = _regex.compile(r"^[A-Za-z0-9_*?]{1,128}$")


class EnvironmentConfig(_Section):
    allow: list[str] = Field(
        default_factory=lambda: ["OPENAI_*", "DASHSCOPE_*", "DYNAGENT_MODEL_*"],
        max_length=200,
    )
    """Environment variables definitions may read as ``${VAR}``: names or glob patterns.
    The service's own secrets (API keys, the Nacos login) are never readable."""

    @field_validator("allow")
    @classmethod
    def _names(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if _VARIABLE_PATTERN.search(pattern) is None:
                raise ValueError(f"{pattern!r} is not a variable name or a * / ? pattern")
        return patterns


class MetricsConfig(_Section):
    public: bool = False
    """Serve ``/metrics`` to anyone; off: it needs an admin or a metrics key."""


DEFAULT_TRACE_BYTES = 256 * 1024 * 1024
"""``traces.max_bytes``: about 256 MB of recent traces (one 1 MB request keeps ~2 MB)."""


class TracesConfig(_Section):
    max_traces: int = Field(default=1000, ge=1)
    max_bytes: int = Field(default=DEFAULT_TRACE_BYTES, ge=1024)
    """The trace store's size bound; the oldest traces go first."""


class CorsConfig(_Section):
    allow_origins: list[str] = []
    """Origins (``https://app.example.com``, or ``*``) whose browser apps may call the API."""


class ServiceConfig(_Section):
    listen: ListenConfig = ListenConfig()
    insecure: bool = False
    """Allow listening on a non-loopback address with auth off."""
    factories: FactoriesConfig = FactoriesConfig()
    nacos: NacosConfig = NacosConfig()
    a2a: A2aConfig = A2aConfig()
    sessions: SessionsConfig = SessionsConfig()
    auth: AuthConfig = AuthConfig()
    logging: LoggingConfig = LoggingConfig()
    traces: TracesConfig = TracesConfig()
    cors: CorsConfig = CorsConfig()
    metrics: MetricsConfig = MetricsConfig()
    environment: EnvironmentConfig = EnvironmentConfig()
    mcp_servers: dict[str, McpServerConfig] = {}
    """stdio MCP servers by name: only here, never in a definition."""
    notifications: NotificationsConfig = NotificationsConfig()
    models: ModelsConfig = ModelsConfig()
    """What the models agents use cost (``models.prices``)."""


ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "DYNAGENT_HOST": ("listen", "host"),
    "DYNAGENT_PORT": ("listen", "port"),
    "DYNAGENT_AGENTS_DIR": ("factories", "default", "directory"),
    "DYNAGENT_SESSIONS_PATH": ("sessions", "path"),
    "DYNAGENT_SESSIONS_STORE": ("sessions", "store"),
    "DYNAGENT_SESSIONS_URL": ("sessions", "url"),
    "DYNAGENT_LOG_LEVEL": ("logging", "level"),
    "DYNAGENT_LOG_JSON": ("logging", "json"),
    "DYNAGENT_KEYS_FILE": ("auth", "keys_file"),
    "NACOS_SERVER_ADDR": ("nacos", "server_addr"),
    "NACOS_NAMESPACE": ("nacos", "namespace"),
    "NACOS_GROUP": ("nacos", "group"),
    "NACOS_USERNAME": ("nacos", "username"),
    "NACOS_PASSWORD": ("nacos", "password"),
    "NACOS_GRAY_TAG": ("nacos", "gray_tag"),
}
"""Environment variables that override one setting each."""


def _expand(value: Any, environ: Mapping[str, str], path: str, source: str) -> Any:
    if isinstance(value, str):
        try:
            return expand_env(value, environ)
        except MissingVariable as exc:
            raise ConfigError(
                "missing environment variable",
                source=source,
                issues=[FieldIssue(path, f"environment variable {exc.name} is not set")],
            ) from None
    if isinstance(value, dict):
        return {
            k: _expand(v, environ, f"{path}.{k}" if path else str(k), source)
            for k, v in value.items()
            # An empty key (``listen:``) takes its defaults, like an absent one.
            if v is not None
        }
    if isinstance(value, list):
        return [_expand(v, environ, f"{path}.{i}", source) for i, v in enumerate(value)]
    return value


def _mapping(data: dict[str, Any], *keys: str) -> dict[str, Any] | None:
    """The mapping at ``keys``, or None; what is not a mapping is left to validation."""
    node: Any = data
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _relative_to(base: Path, data: dict[str, Any]) -> None:
    """Paths in a config file are relative to the file, not to the working directory."""
    for keys in (
        ("sessions", "path"),
        ("nacos", "snapshot_dir"),
        ("auth", "keys_file"),
        ("factories", "default", "directory"),
        ("factories", "nacos_prompt", "directory"),
    ):
        node = _mapping(data, *keys[:-1])
        value = node.get(keys[-1]) if node is not None else None
        if node is not None and isinstance(value, str) and value and not Path(value).is_absolute():
            node[keys[-1]] = str(base / value)


def _mcp_cwd(base: Path, data: dict[str, Any]) -> None:
    """stdio MCP servers run in the config file's folder unless told otherwise."""
    servers = data.get("mcp_servers")
    for server in servers.values() if isinstance(servers, dict) else ():
        if isinstance(server, dict):
            cwd = server.get("cwd")
            if cwd is None or (isinstance(cwd, str) and not Path(cwd).is_absolute()):
                server["cwd"] = str(base / (cwd or "."))


def _override(data: dict[str, Any], keys: tuple[str, ...], value: str) -> None:
    node = data
    for key in keys[:-1]:
        if key not in node:
            node[key] = {}
        if not isinstance(node[key], dict):
            return  # validation names the setting that is not a mapping
        node = node[key]
    node[keys[-1]] = value


def load_config(
    path: Path | None = None, environ: Mapping[str, str] | None = None
) -> ServiceConfig:
    """Read the config file (optional), expand ``${VAR}``, apply env overrides."""
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    source = str(path) if path else "environment"
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read the service config: {exc}", source=source) from None
        if not isinstance(loaded, dict):
            raise ConfigError("the service config must be a mapping", source=source)
        data = _expand(loaded, environ, "", source)
        _relative_to(path.parent, data)
        _mcp_cwd(path.parent, data)
    for name, keys in ENV_OVERRIDES.items():
        if environ.get(name):
            _override(data, keys, environ[name])
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            "invalid service config", source=source, issues=issues_from(exc, ServiceConfig, data)
        ) from None
