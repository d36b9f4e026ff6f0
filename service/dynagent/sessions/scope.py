"""Whose a session is: the key a conversation is stored under, and fresh session ids.

A caller names a conversation with its own ``session_id``; the store keeps it under a
key made of (the caller's stable identity, the agent, that id), so the same id from
another API key or for another agent is another conversation. This happens above the
``SessionStore``, so every store (memory, SQLite, Redis, …) gets it without knowing.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets

ANONYMOUS = "anonymous"
"""The identity of every caller when auth is off: sessions are then scoped by agent."""

MAX_SESSION_ID = 256
"""The longest ``session_id`` a caller may give, on every route."""

KEY_PREFIX = "s1:"
"""Marks the key scheme, so a later one can live beside it."""


def session_key(principal: str, agent: str, session_id: str) -> str:
    """The store key of ``session_id`` for ``principal`` (a key's stable identity, never
    the key itself) calling ``agent``: a digest, so no choice of the three parts can
    make two of them meet, and the store never holds who the caller is in clear."""
    parts = json.dumps([principal, agent, session_id], ensure_ascii=False)
    return KEY_PREFIX + hashlib.sha256(parts.encode()).hexdigest()


def new_session_id() -> str:
    """A session id for the service to hand out: 128 random bits from ``secrets``."""
    return secrets.token_urlsafe(16)


def new_trace_id() -> str:
    """A trace id: 128 random bits (hex) from the system's CSPRNG, as
    ``secrets.token_hex(16)`` draws them (without its two calls: every run makes one);
    it is what a caller reads a trace by."""
    return os.urandom(16).hex()
