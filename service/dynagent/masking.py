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
        self._by_first: dict[str, tuple[str, ...]] = {}
        self._longest = 0
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        fresh = {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - set(self._values)
        if fresh:
            # Longest first, so a secret that contains another is masked whole.
            self._values = tuple(sorted({*self._values, *fresh}, key=len, reverse=True))
            by_first: dict[str, list[str]] = {}
            for secret in self._values:
                by_first.setdefault(secret[0], []).append(secret)
            self._by_first = {char: tuple(group) for char, group in by_first.items()}
            self._longest = len(self._values[0])

    def mask(self, text: str) -> str:
        for secret in self._values:
            if secret in text:
                text = text.replace(secret, MASK)
        return text

    def open_prefix(self, text: str) -> int:
        """The length of the longest end of ``text`` that is the start of a secret."""
        tail = text[-(self._longest - 1) :] if self._longest > 1 else ""
        for start, char in enumerate(tail):  # leftmost first: the longest end
            for secret in self._by_first.get(char, ()):
                if len(secret) > len(tail) - start and secret.startswith(tail[start:]):
                    return len(tail) - start
        return 0

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __len__(self) -> int:
        return len(self._values)


class StreamMask:
    """Masks text that arrives in pieces (streamed model deltas): a secret split over two
    pieces is masked too. The tail of a piece that could begin a secret is held back
    until the next piece, or ``flush``, shows whether it does."""

    def __init__(self, secrets: SecretValues) -> None:
        self._secrets = secrets
        self._carry = ""

    def feed(self, piece: str) -> str:
        """What of ``carry + piece`` may go out now, masked."""
        text = self._secrets.mask(self._carry + piece)
        keep = self._secrets.open_prefix(text)
        self._carry = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The held-back tail: the stream moved on, so it began no secret."""
        rest, self._carry = self._carry, ""
        return rest
