"""Values that must never surface: API keys, passwords, and what a definition took from
the environment into a credential. One set, filled as the service learns them, read by
the log sink, the run events (so traces and SSE streams) and whatever else prints."""

from __future__ import annotations

from collections.abc import Iterable

MASK = "***"
MIN_SECRET_CHARS = 6
"""Shorter values would mask ordinary words; real secrets are long."""


class SecretValues:
    """A growing set of secret values and the one function that hides them in text.

    Never shrinks: a key removed from the keys file may still sit in a trace."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._values: tuple[str, ...] = ()
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        fresh = {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - set(self._values)
        if fresh:
            # Longest first, so a secret that contains another is masked whole.
            self._values = tuple(sorted({*self._values, *fresh}, key=len, reverse=True))

    def mask(self, text: str) -> str:
        for secret in self._values:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __len__(self) -> int:
        return len(self._values)
