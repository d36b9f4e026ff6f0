"""Conversation stores: in memory, SQLite (default)."""

from .base import SessionLocks, SessionStore
from .memory import MemorySessionStore
from .sqlite import SqliteSessionStore

__all__ = ["MemorySessionStore", "SessionLocks", "SessionStore", "SqliteSessionStore"]
