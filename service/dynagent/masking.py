"""Values that must never surface: API keys, passwords, and what a definition took from
the environment into a credential. One set, filled as the service learns them, read by
the log sink, the run events (so traces and SSE streams) and whatever else prints.

The service's own secrets (API keys, the Nacos password) stay for the life of the
process. What a definition contributes (its credentials, its URLs' query values) is
*owned* by that definition: replaced when it is rebuilt and dropped when it goes, so an
edit never leaves a mask behind it. A definition can never make a protocol word a mask
(``is_protocol_word``): masking ``serving`` or ``forbidden`` would rewrite every agent's
state and every caller's error type.
"""

from __future__ import annotations

from collections.abc import Iterable

from dynagent import _regex

MASK = "***"
MIN_SECRET_CHARS = 6
"""Shorter values would mask ordinary words; real secrets are long."""

_SYLLABLE = r"(?:[A-Z]?[a-z]+|[A-Z]+)"
_WORD = _regex.compile(rf"{_SYLLABLE}(?:[ _./:-]{_SYLLABLE})*")
MAX_WORD_CHARS = 32
"""A value of letters alone (and separators) up to this long is a word, not a credential."""


def is_protocol_word(value: str) -> bool:
    """Whether ``value`` reads as a word of a protocol (``serving``, ``forbidden``,
    ``application/json``, ``chat.completion``, ``Bearer``, ``GET``) rather than a
    credential: words of letters (lower case, capitalised or all capitals) joined by single
    separators, and short. Such a value taken from a definition is never masked;
    credentials carry digits, mix cases inside a word (base64) or are long."""
    return len(value) <= MAX_WORD_CHARS and _WORD.fullmatch(value) is not None


def _qualifies(value: str) -> bool:
    return len(value) >= MIN_SECRET_CHARS and not is_protocol_word(value)


class SecretValues:
    """A set of secret values and the one function that hides them in text.

    ``add`` keeps a value for the life of the process (a key removed from the keys file
    may still sit in a trace); ``own`` keeps a definition's values until it is rebuilt
    (``own`` again) or removed (``forget``)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self._kept: frozenset[str] = frozenset()
        self._owned: dict[str, frozenset[str]] = {}
        self._values: tuple[str, ...] = ()
        self._by_first: dict[str, tuple[str, ...]] = {}
        self._longest = 0
        self.version = 0
        """Bumped on every change (views built on this set follow it)."""
        self.add(values)

    def add(self, values: Iterable[str]) -> None:
        """Mask ``values`` from now on, for good (the service's own secrets)."""
        fresh = {v for v in values if v and len(v) >= MIN_SECRET_CHARS} - self._kept
        if fresh:
            self._kept |= fresh
            self._rebuild()

    def own(self, owner: str, values: Iterable[str]) -> None:
        """The values of the definition ``owner`` are now ``values`` (protocol words and
        short values left out); those it held before and holds no longer are unmasked."""
        kept = frozenset(v for v in values if v and _qualifies(v))
        if self._owned.get(owner, frozenset()) != kept:
            if kept:
                self._owned[owner] = kept
            else:
                self._owned.pop(owner, None)
            self._rebuild()

    def owned(self, owner: str) -> frozenset[str]:
        return self._owned.get(owner, frozenset())

    def forget(self, owner: str) -> None:
        """The definition ``owner`` is gone: its values are masked no more (unless another
        owner, or the service, holds them too)."""
        if self._owned.pop(owner, None) is not None:
            self._rebuild()

    def values(self) -> frozenset[str]:
        return frozenset(self._values)

    def _rebuild(self) -> None:
        every = set(self._kept).union(*self._owned.values())
        # Longest first, so a secret that contains another is masked whole.
        self._values = tuple(sorted(every, key=lambda v: (-len(v), v)))
        by_first: dict[str, list[str]] = {}
        for secret in self._values:
            by_first.setdefault(secret[0], []).append(secret)
        self._by_first = {char: tuple(group) for char, group in by_first.items()}
        self._longest = len(self._values[0]) if self._values else 0
        self.version += 1

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

    def scoped(self, values: Iterable[str]) -> SecretValues:
        """This set plus ``values`` (one agent's own), following this set's changes: what
        an agent masks its runs with, so that a run still going when its definition is
        replaced or removed keeps masking that definition's values."""
        own = frozenset(v for v in values if v and _qualifies(v))
        return ScopedSecrets(self, own) if own else self

    def __contains__(self, value: object) -> bool:
        return value in self._values

    def __len__(self) -> int:
        return len(self._values)


class ScopedSecrets(SecretValues):
    """``parent``'s values and an agent's own; rebuilt when ``parent`` changes."""

    def __init__(self, parent: SecretValues, values: Iterable[str]) -> None:
        super().__init__()
        self._parent = parent
        self._seen = -1
        self._own = frozenset(v for v in values if v and _qualifies(v))
        self._follow()

    def _follow(self) -> None:
        if self._seen != self._parent.version:
            self._seen = self._parent.version
            self._kept = self._parent.values() | self._own
            self._rebuild()

    def mask(self, text: str) -> str:
        self._follow()
        return super().mask(text)

    def open_prefix(self, text: str) -> int:
        self._follow()
        return super().open_prefix(text)

    def __contains__(self, value: object) -> bool:
        self._follow()
        return super().__contains__(value)

    def __len__(self) -> int:
        self._follow()
        return super().__len__()


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
