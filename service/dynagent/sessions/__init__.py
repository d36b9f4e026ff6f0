"""Conversation stores: in memory, SQLite (default)."""

from .base import SessionLocks, SessionStore
from .memory import MemorySessionStore
from .scope import new_session_id, session_key
from .sqlite import SqliteSessionStore

__all__ = [
    "MemorySessionStore",
    "SessionLocks",
    "SessionStore",
    "SqliteSessionStore",
    "new_session_id",
    "session_key",
]
