"""The two substitution syntaxes of an agent definition.

``${VAR}`` / ``${VAR:-default}`` pull values from the environment when an agent
is built; ``{{name}}`` fills prompt variables when a run starts. Both are one
pass and never re-scan what they inserted, so a value cannot inject syntax.
"""

from __future__ import annotations

from collections.abc import Mapping

from dynagent import _regex

_ENV = _regex.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_VAR = _regex.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


class MissingVariable(KeyError):
    """A ``${VAR}`` or ``{{var}}`` has no value and no default."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def expand_env(text: str, environ: Mapping[str, str]) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` from ``environ``."""

    def replace(match: _regex.Match) -> str:
        name, default = match.group(1) or "", match.group(2)
        value = environ.get(name)
        if value is None or (value == "" and default is not None):
            if default is None:
                raise MissingVariable(name)
            return default
        return value

    return _ENV.sub(replace, text)


def env_names(text: str) -> list[str]:
    """The environment variables a text refers to."""
    return [m.group(1) or "" for m in _ENV.finditer(text)]


def render(template: str, variables: Mapping[str, str]) -> str:
    """Fill ``{{name}}`` placeholders; raises ``MissingVariable`` for an unknown one."""
    if "{{" not in template:  # most prompts: no placeholder, nothing to scan for
        return template

    def replace(match: _regex.Match) -> str:
        name = match.group(1) or ""
        if name not in variables:
            raise MissingVariable(name)
        return str(variables[name])

    return _VAR.sub(replace, template)


def template_variables(template: str) -> set[str]:
    """The ``{{name}}`` placeholders a template uses."""
    return {m.group(1) or "" for m in _VAR.finditer(template)}
