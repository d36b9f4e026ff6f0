"""Which environment variables a definition may read, and the one ``${VAR}`` expansion
the builder applies to every field that takes them.

A definition is data from a config center that many people can edit; the environment is
the service's. So ``${VAR}`` reads only names the service config allows
(``environment.allow``, glob patterns), never a secret of the service itself, and every
value that lands in a credential — taken from the environment or written in the
definition itself (``Authorization: Bearer abc123``) — is added to the secrets masked
wherever text surfaces, for as long as the definition is served.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.spec._templates import MissingVariable, env_names, expand_env


class SecretSink(Protocol):
    """Where the secrets an expansion finds go (``SecretValues``, or a build's own set)."""

    def add(self, values: Iterable[str]) -> None: ...


DEFAULT_ALLOW = ("OPENAI_*", "DASHSCOPE_*", "DYNAGENT_MODEL_*")
"""What definitions may read when the service config does not say: model endpoints."""

SERVICE_SECRETS = (
    "DYNAGENT_API_KEYS",
    "DYNAGENT_ADMIN_KEYS",
    "DYNAGENT_METRICS_KEYS",
    "DYNAGENT_*_KEYS",
    "NACOS_*",
)
"""Never readable by a definition, whatever ``environment.allow`` says (the configured
``auth.*_env`` names are added to these)."""

SECRET_LOOKING = ("*KEY*", "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*")
"""A variable named like this is masked wherever it is expanded, not only in credentials."""


@dataclass(frozen=True, slots=True)
class EnvironmentPolicy:
    """The environment variables definitions may read."""

    allow: tuple[str, ...] = DEFAULT_ALLOW
    """Glob patterns (``OPENAI_*``) or exact names."""
    deny: frozenset[str] = frozenset()
    """Names or patterns refused on top of ``SERVICE_SECRETS``."""

    def refusal(self, name: str) -> str | None:
        """Why a definition may not read ``name``, or None when it may."""
        if _matches(name, (*SERVICE_SECRETS, *self.deny)):
            return (
                f"environment variable {name} is a secret of the service; no definition may read it"
            )
        if not _matches(name, self.allow):
            return (
                f"environment variable {name} is not in the service's environment.allow; "
                "add it (or a pattern) there to let definitions read it"
            )
        return None


def service_policy(allow: Iterable[str], auth_envs: Iterable[str]) -> EnvironmentPolicy:
    """The service's policy: ``environment.allow``, and the configured ``auth.*_env``
    names (wherever the keys live, they are secrets of the service)."""
    return EnvironmentPolicy(tuple(allow), frozenset(auth_envs))


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatchcase(name, pattern) for pattern in patterns)


def expand(
    text: str,
    path: str,
    environ: Mapping[str, str],
    policy: EnvironmentPolicy,
    secrets: SecretSink,
    *,
    secret: bool = False,
) -> str:
    """``text`` with ``${VAR}`` / ``${VAR:-default}`` filled in, for the field at ``path``.

    Raises ``ConfigError`` naming the field and the variable when a name is not allowed
    or not set. ``secret``: the field is a credential, so its value is masked from now on,
    whether it came from the environment or was written in the definition — a field named
    like one (``api_key``, any ``headers.*``) always is; so is a value of a variable named
    like a secret, wherever it lands, and the user, password and query values of a
    ``*url`` field.
    """
    names = env_names(text)
    for name in names:
        reason = policy.refusal(name)
        if reason is not None:
            raise ConfigError("environment variable not allowed", issues=[FieldIssue(path, reason)])
    try:
        filled = expand_env(text, environ)
    except MissingVariable as exc:
        raise ConfigError(
            "missing environment variable",
            issues=[FieldIssue(path, f"environment variable {exc.name} is not set")],
        ) from None
    secret = secret or _credential_field(path)
    secrets.add(environ.get(n, "") for n in names if secret or _matches(n, SECRET_LOOKING))
    if path.endswith("url"):  # an address, not a credential: only the parts that are
        secrets.add(url_credentials(filled))
    elif secret:
        secrets.add(credential_parts(filled))
    return filled


def _credential_field(path: str) -> bool:
    last = path.rsplit(".", 1)[-1].lower()
    return ".headers." in f".{path}" or last in {"api_key", "token", "password", "secret"}


def credential_parts(value: str) -> list[str]:
    """What of a credential's value an endpoint may echo: the whole value and each of its
    words (``Bearer abc123`` → the token alone too); the scheme word is no secret and is
    left out where masks are made (``masking.is_protocol_word``)."""
    return [value, *value.split()]


def url_credentials(url: str) -> list[str]:
    """The parts of a URL that are credentials: user, password and query values."""
    try:
        parts = urlsplit(url)
        found = [parts.username or "", parts.password or ""]
    except ValueError:
        return []
    return [*found, *(value for _, value in parse_qsl(parts.query))]
