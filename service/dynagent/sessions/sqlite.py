"""Sessions in a SQLite file: the default store, survives restarts.

The stdlib driver is blocking, so calls run in a worker thread; one
connection, WAL mode, and each append is one transaction.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from ..models.base import Message
from .base import SessionLocks

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
)
"""
_PINS = """
CREATE TABLE IF NOT EXISTS pins (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


class SqliteSessionStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute(_SCHEMA)
        self._db.execute(_PINS)
        self._mutex = threading.Lock()
        self._locks = SessionLocks()

    async def load(self, session_id: str) -> list[Message]:
        return await asyncio.to_thread(self._load, session_id)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        if messages:
            await asyncio.to_thread(self._append, session_id, [json.dumps(m) for m in messages])

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._locks.hold(session_id)

    async def pin(self, key: str, value: str) -> str:
        return await asyncio.to_thread(self._pin, key, value)

    def _pin(self, key: str, value: str) -> str:
        with self._mutex:
            self._db.execute(
                "INSERT OR IGNORE INTO pins VALUES (?, ?, ?)", (key, value, time.time())
            )
            (found,) = self._db.execute("SELECT value FROM pins WHERE key = ?", (key,)).fetchone()
        return str(found)

    async def aclose(self) -> None:
        with self._mutex:
            self._db.close()

    def _load(self, session_id: str) -> list[Message]:
        with self._mutex:
            rows = self._db.execute(
                "SELECT message FROM messages WHERE session_id = ? ORDER BY seq", (session_id,)
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    def _append(self, session_id: str, encoded: list[str]) -> None:
        now = time.time()
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                (last,) = self._db.execute(
                    "SELECT COALESCE(MAX(seq), -1) FROM messages WHERE session_id = ?",
                    (session_id,),
                ).fetchone()
                self._db.executemany(
                    "INSERT INTO messages VALUES (?, ?, ?, ?)",
                    [(session_id, last + 1 + i, text, now) for i, text in enumerate(encoded)],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
