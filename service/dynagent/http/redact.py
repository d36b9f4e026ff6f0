"""What the operations page may show of definitions and runs: secrets masked as the
logs mask them (the service's API keys, the Nacos password, ``OPENAI_API_KEY``), and
in definitions every credential-like field, unless it only names an environment
variable (``${VAR}``, shown without its default)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .. import _regex
from ..logs import MASK

_SECRET_FIELDS = _regex.compile(r"(?i)(api_?key|password|secret|token|authorization)")
_ENV_REFERENCE = _regex.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}$")


class Redactor:
    """Masks known secret values in any JSON-like structure (strings replaced whole or
    in part, keys and numbers left alone)."""

    def __init__(self, secrets: Iterable[str]) -> None:
        # Short values would mask ordinary words; real keys are long (as in the log mask).
        self._secrets = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, MASK)
        return value

    def value(self, value: Any) -> Any:
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value

    def definition(self, document: Any) -> Any:
        """A definition as the page shows it: credential fields and header values masked."""
        return self.value(_mask_fields(document, secret=False))


def _mask_fields(value: Any, *, secret: bool) -> Any:
    if isinstance(value, dict):
        return {
            key: _mask_fields(
                item, secret=secret or key == "headers" or bool(_SECRET_FIELDS.search(key))
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_mask_fields(item, secret=secret) for item in value]
    if secret and isinstance(value, str):
        reference = _ENV_REFERENCE.match(value)
        return f"${{{reference.group(1)}}}" if reference else MASK
    return value
