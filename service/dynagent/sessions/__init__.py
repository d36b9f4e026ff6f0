"""Conversation stores: in memory, SQLite (default)."""

from dynagent.sessions.base import SessionLocks, SessionStore
from dynagent.sessions.memory import MemorySessionStore
from dynagent.sessions.scope import new_session_id, session_key
from dynagent.sessions.sqlite import SqliteSessionStore

__all__ = [
    "MemorySessionStore",
    "SessionLocks",
    "SessionStore",
    "SqliteSessionStore",
    "new_session_id",
    "session_key",
]
