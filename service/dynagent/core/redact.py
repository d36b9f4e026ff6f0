"""What the operations page may show of a definition: every credential-like field masked
unless it only names an environment variable (``${VAR}``, shown without its default), and
the service's known secrets masked as everywhere else (``SecretValues``)."""

from __future__ import annotations

from typing import Any

from dynagent import _regex
from dynagent.masking import MASK, SecretValues

_SECRET_FIELDS = _regex.compile(r"(?i)(api_?key|password|secret|token|authorization)")
_ENV_REFERENCE = _regex.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}$")


class Redactor:
    """Masks secrets in JSON-like structures: known values in any string, and in
    definitions the values of credential fields and headers."""

    def __init__(self, secrets: SecretValues) -> None:
        self._secrets = secrets

    def text(self, value: str) -> str:
        return self._secrets.mask(value)

    def value(self, value: Any) -> Any:
        if not len(self._secrets):
            return value
        if isinstance(value, str):
            return self._secrets.mask(value)
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
