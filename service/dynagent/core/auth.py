"""API keys: ``Authorization: Bearer <key>``, optionally limited to some agents.

Keys are kept only as SHA-256 digests and compared with ``hmac.compare_digest``
against every configured key, so timing reveals nothing about which matched.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dynagent.config import AuthConfig
from dynagent.exceptions import ConfigError, Forbidden, Unauthorized
from dynagent.sessions.scope import ANONYMOUS as ANONYMOUS_PRINCIPAL
from dynagent.spec.agent import issues_from


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the key's name and what it may reach."""

    name: str
    agents: frozenset[str] | None = None
    """``None``: every agent."""
    admin: bool = False
    key_digest: str = ""
    metrics: bool = False
    """May read ``/metrics`` (of its agents), without being an admin."""
    metrics_only: bool = False
    """A dedicated metrics key: every agent's series, and no agent to call."""
    principal: str = ANONYMOUS_PRINCIPAL
    """Who the caller is, stably and without the key: ``key:<name>`` for a keys-file
    entry, ``digest:<sha-256 of the key>`` for a key from the environment. Sessions are
    scoped to it (``sessions/scope.py``), and every run records it as its owner."""
    feedback: bool = False
    """May rate any run of its agents (a labelling service), not only its own."""

    def check_agent(self, agent: str) -> None:
        if self.agents is not None and agent not in self.agents:
            raise Forbidden(f"this API key may not call agent {agent!r}")

    def may_see(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents

    def may_read_run(self, owner: str, agent: str) -> bool:
        """What a run leaves (its trace, summary, stored response) is shown to the identity
        that made it and to admins, and only for an agent the reader may call."""
        return self.may_see(agent) and (self.admin or owner == self.principal)

    def may_rate_run(self, owner: str, agent: str) -> bool:
        """A run is rated by the identity that made it, or by a key given ``feedback``."""
        return self.may_see(agent) and (self.feedback or owner == self.principal)

    def metrics_scope(self) -> frozenset[str] | None:
        """The agents whose series this caller may read (``None``: all, and the totals)."""
        if not (self.admin or self.metrics):
            raise Forbidden(
                "/metrics needs an admin or a metrics API key (auth.metrics_keys_env, "
                "or metrics: true in the keys file), unless metrics.public is true"
            )
        return None if self.metrics_only else self.agents


ANONYMOUS = Caller("anonymous", None, admin=True, principal=ANONYMOUS_PRINCIPAL)
"""The caller when auth is off."""


class _KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    key: str = Field(min_length=16)
    agents: list[str] | None = None
    admin: bool = False
    metrics: bool = False
    feedback: bool = False


class _KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    keys: list[_KeyEntry]

    @field_validator("keys")
    @classmethod
    def _unique_names(cls, keys: list[_KeyEntry]) -> list[_KeyEntry]:
        # A name is the key's identity: two keys of one name would share sessions.
        seen: set[str] = set()
        for entry in keys:
            if entry.name in seen:
                raise ValueError(f"two keys are named {entry.name!r}; names must be unique")
            seen.add(entry.name)
        return keys


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    def __init__(self, entries: list[tuple[str, Caller]]) -> None:
        self._entries = [(_digest(key), caller) for key, caller in entries]
        self.secrets = [key for key, _ in entries]
        """Raw keys, only so the log mask can hide them."""
        self._enabled = bool(entries)
        self.generation = 0
        """Counts reloads: a holder of a ``Caller`` re-checks it when this moved."""

    def replace(self, other: ApiKeys) -> None:
        """Take ``other``'s keys (a reloaded keys file): one reference swap, so a request
        checks either the old keys or the new ones, never a mix. Auth once on stays on:
        a keys file emptied or deleted leaves no valid key, not an open service."""
        self._entries, self.secrets = other._entries, other.secrets
        self._enabled = self._enabled or other._enabled
        self.generation += 1

    def holds(self, caller: Caller) -> bool:
        """Whether ``caller`` is still one of the keys, with the same rights: a stream that
        outlives its request re-checks its key, so a removed or narrowed key ends it."""
        if not self._enabled:
            return caller is ANONYMOUS
        return any(known == caller for _, known in self._entries)

    @property
    def enabled(self) -> bool:
        return self._enabled

    def authenticate(self, header: str | None) -> Caller:
        if not self.enabled:
            return ANONYMOUS
        # The scheme is a token compared without regard to case (RFC 9110, 11.1):
        # "bearer <key>" is a bearer key too.
        scheme, _, key = (header or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise Unauthorized("send an API key as 'Authorization: Bearer <key>'")
        digest = _digest(key.strip())
        found: Caller | None = None
        for known, caller in self._entries:
            if hmac.compare_digest(known, digest) and found is None:
                found = caller
        if found is None:
            raise Unauthorized("unknown API key")
        return found

    @classmethod
    def from_config(cls, environ: Mapping[str, str], auth: AuthConfig) -> ApiKeys:
        return cls.load(
            environ, auth.keys_env, auth.keys_file, auth.admin_keys_env, auth.metrics_keys_env
        )

    @classmethod
    def load(
        cls,
        environ: Mapping[str, str],
        keys_env: str,
        keys_file: Path | None,
        admin_keys_env: str = "DYNAGENT_ADMIN_KEYS",
        metrics_keys_env: str = "DYNAGENT_METRICS_KEYS",
    ) -> ApiKeys:
        entries: list[tuple[str, Caller]] = []
        kinds = ((keys_env, "user"), (admin_keys_env, "admin"), (metrics_keys_env, "metrics"))
        for env, kind in kinds:
            for i, key in enumerate(k.strip() for k in environ.get(env, "").split(",")):
                if key:
                    caller = Caller(
                        f"{env}[{i}]",
                        # A metrics key reaches no agent: it reads /metrics only.
                        frozenset() if kind == "metrics" else None,
                        admin=kind == "admin",
                        key_digest=_short(key),
                        metrics=kind == "metrics",
                        metrics_only=kind == "metrics",
                        # Not the position: removing one key must not hand its sessions on.
                        principal=f"digest:{hashlib.sha256(key.encode()).hexdigest()}",
                    )
                    entries.append((key, caller))
        if keys_file is not None:
            entries.extend(_from_file(keys_file))
        return cls(entries)


def _where(error: yaml.YAMLError) -> str:
    """What is wrong and where, without PyYAML's quote of the line: it holds a key."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or type(error).__name__
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark else problem


def _short(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()[:12]


def _from_file(path: Path) -> list[tuple[str, Caller]]:
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        parsed = _KeysFile.model_validate(data)
    except OSError as exc:
        raise ConfigError(f"cannot read the keys file: {exc}", source=str(path)) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"keys file is not valid YAML: {_where(exc)}", source=str(path)) from None
    except ValidationError as exc:
        raise ConfigError("invalid keys file", source=str(path), issues=issues_from(exc)) from None
    return [
        (
            entry.key,
            Caller(
                entry.name,
                frozenset(entry.agents) if entry.agents is not None else None,
                admin=entry.admin,
                key_digest=_short(entry.key),
                metrics=entry.metrics,
                principal=f"key:{entry.name}",
                feedback=entry.feedback,
            ),
        )
        for entry in parsed.keys
    ]
