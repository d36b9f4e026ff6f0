"""The service configuration: a YAML file, ``${VAR}`` from the environment, then
``DYNAGENT_*`` environment overrides. Secrets never sit in the file itself."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._templates import MissingVariable, expand_env
from .exceptions import ConfigError, FieldIssue
from .sessions.base import DEFAULT_HISTORY_BYTES
from .spec import issues_from


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ListenConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    """Larger request bodies get 413."""
    drain_seconds: float = Field(default=30, ge=0)
    """On SIGTERM, how long running requests may take to finish."""


class DefaultFactoryConfig(_Section):
    directory: Path | None = None
    """Folder of agent files, watched for changes."""


class NacosConfig(_Section):
    server_addr: str = "127.0.0.1:8848"
    namespace: str = ""
    group: str = "AGENTS"
    username: str = ""
    password: str = ""
    snapshot_dir: Path = Path("var/nacos-snapshot")
    """Dynagent's own last-good copy of every document, used when Nacos is down at start."""
    poll_seconds: float = Field(default=2.0, gt=0, le=300)
    """How often the group is listed to find new agents and catch up after outages
    (changes to known agents are pushed at once)."""
    prompt_group: str = "PROMPTS"
    """Group of plain-config prompts, for servers without the prompt registry."""


class FactoriesConfig(_Section):
    default: DefaultFactoryConfig = DefaultFactoryConfig()
    nacos: bool = False
    """Serve every agent in ``nacos.group`` (full-agent factory)."""
    nacos_prompt: DefaultFactoryConfig | None = None
    """Local specs whose ``prompt.ref`` points into Nacos (prompt-only factory)."""


class SessionsConfig(_Section):
    store: Literal["sqlite", "memory"] = "sqlite"
    path: Path = Path("var/sessions.db")
    max_history_bytes: int = Field(default=DEFAULT_HISTORY_BYTES, ge=1024)
    """A session keeps (and a run is given) its newest whole turns within this many bytes."""


class AuthConfig(_Section):
    keys_env: str = "DYNAGENT_API_KEYS"
    """Environment variable holding comma-separated API keys (access to every agent)."""
    admin_keys_env: str = "DYNAGENT_ADMIN_KEYS"
    """Environment variable holding comma-separated admin keys (may also promote and roll back)."""
    keys_file: Path | None = None
    """YAML file: ``keys: [{name, key, agents?: [...], admin?: bool}]``."""


class LoggingConfig(_Section):
    level: str = "INFO"
    json_lines: bool = Field(default=False, alias="json")
    """One JSON object per line (for log shippers) instead of text."""


DEFAULT_TRACE_BYTES = 256 * 1024 * 1024
"""``traces.max_bytes``: about 256 MB of recent traces (one 1 MB request keeps ~2 MB)."""


class TracesConfig(_Section):
    max_traces: int = Field(default=1000, ge=1)
    max_bytes: int = Field(default=DEFAULT_TRACE_BYTES, ge=1024)
    """The trace store's size bound; the oldest traces go first."""


class ServiceConfig(_Section):
    listen: ListenConfig = ListenConfig()
    insecure: bool = False
    """Allow listening on a non-loopback address with auth off."""
    factories: FactoriesConfig = FactoriesConfig()
    nacos: NacosConfig = NacosConfig()
    sessions: SessionsConfig = SessionsConfig()
    auth: AuthConfig = AuthConfig()
    logging: LoggingConfig = LoggingConfig()
    traces: TracesConfig = TracesConfig()


ENV_OVERRIDES: dict[str, tuple[str, ...]] = {
    "DYNAGENT_HOST": ("listen", "host"),
    "DYNAGENT_PORT": ("listen", "port"),
    "DYNAGENT_AGENTS_DIR": ("factories", "default", "directory"),
    "DYNAGENT_SESSIONS_PATH": ("sessions", "path"),
    "DYNAGENT_LOG_LEVEL": ("logging", "level"),
    "DYNAGENT_LOG_JSON": ("logging", "json"),
    "DYNAGENT_KEYS_FILE": ("auth", "keys_file"),
    "NACOS_SERVER_ADDR": ("nacos", "server_addr"),
    "NACOS_NAMESPACE": ("nacos", "namespace"),
    "NACOS_GROUP": ("nacos", "group"),
    "NACOS_USERNAME": ("nacos", "username"),
    "NACOS_PASSWORD": ("nacos", "password"),
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
    for name, keys in ENV_OVERRIDES.items():
        if environ.get(name):
            _override(data, keys, environ[name])
    try:
        return ServiceConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            "invalid service config", source=source, issues=issues_from(exc)
        ) from None
