"""Sessions in a SQLite file: the default store, survives restarts.

The stdlib driver is blocking, so calls run in a worker thread; one
connection, WAL mode, and each append is one transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from loguru import logger

from dynagent.exceptions import StartupError
from dynagent.models.base import Message
from dynagent.sessions.base import (
    DEFAULT_HISTORY_BYTES,
    DEFAULT_SESSION_TTL,
    PURGE_EVERY,
    SessionLocks,
    first_kept,
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    message TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (session_id, seq)
)
"""
_USED = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id TEXT PRIMARY KEY,
    used_at REAL NOT NULL
)
"""
_PINS = """
CREATE TABLE IF NOT EXISTS pins (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at REAL NOT NULL
)
"""


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        (verdict,) = db.execute("PRAGMA quick_check(1)").fetchone()
        if verdict != "ok":
            raise sqlite3.DatabaseError(f"quick_check: {verdict}")
        db.execute(_SCHEMA)
        db.execute(_USED)
        db.execute(_PINS)
        # A database written before sessions expired: its sessions count as used when
        # their last message was.
        db.execute(
            "INSERT OR IGNORE INTO sessions SELECT session_id, MAX(created_at) FROM messages "
            "WHERE session_id NOT IN (SELECT session_id FROM sessions) GROUP BY session_id"
        )
    except BaseException:
        db.close()
        raise
    return db


def open_database(path: Path) -> sqlite3.Connection:
    """The session database at ``path``, by this rule:

    - a file that is not a readable SQLite database (truncated, corrupt, something else)
      is moved aside to ``<name>.corrupt-<unix time>`` with an ERROR naming both paths,
      and a new empty database is started: the service serves, the old sessions are
      kept for inspection;
    - a path that cannot be opened at all (a directory, no permission) is a
      ``StartupError``: ``dynagent serve`` says so in one line and exits 2.
    """
    if str(path) != ":memory:":
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        try:
            return _connect(str(path))
        except sqlite3.OperationalError:
            raise
        except sqlite3.DatabaseError as exc:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            path.replace(aside)
            for suffix in ("-wal", "-shm"):
                path.with_name(path.name + suffix).unlink(missing_ok=True)
            logger.error(
                "session database {} is not readable ({}): moved aside to {}; "
                "starting with no sessions",
                path,
                exc,
                aside,
            )
            return _connect(str(path))
    except sqlite3.OperationalError as exc:
        raise StartupError(
            f"cannot open the session database {path} ({exc}): check sessions.path"
        ) from None


PIN_SECONDS = 30 * 24 * 3600
"""How long a session's variant is remembered (as in Redis)."""


class SqliteSessionStore:
    """Constructing it opens (or creates) the file: an event loop does it in a worker thread."""

    def __init__(
        self,
        path: str | Path,
        max_history_bytes: int = DEFAULT_HISTORY_BYTES,
        *,
        ttl: float = DEFAULT_SESSION_TTL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self.max_history_bytes = max_history_bytes
        """The budget of ``first_kept``: older turns are neither loaded nor kept."""
        self.ttl = ttl
        """Seconds a session is kept after its last use; then its rows are deleted."""
        self._clock = clock
        self._db = open_database(self.path)
        self._mutex = threading.Lock()
        self._locks = SessionLocks()
        self._swept = -PURGE_EVERY  # the first use sweeps what expired while stopped

    async def load(self, session_id: str) -> list[Message]:
        return await asyncio.to_thread(self._load, session_id)

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        if messages:
            await asyncio.to_thread(self._append, session_id, [json.dumps(m) for m in messages])

    async def delete(self, session_id: str) -> bool:
        async with self._locks.hold(session_id):
            return await asyncio.to_thread(self._delete, session_id)

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
        await asyncio.to_thread(self._close)  # folds the write-ahead log into the file

    def _close(self) -> None:
        with self._mutex:
            self._db.close()

    def _first_kept(self, session_id: str) -> int | None:
        # Sizes and roles only, newest first, read until the budget is spent.
        rows = self._db.execute(
            "SELECT seq, length(CAST(message AS BLOB)), json_extract(message, '$.role') "
            "FROM messages WHERE session_id = ? ORDER BY seq DESC",
            (session_id,),
        )
        try:
            return first_kept(rows, self.max_history_bytes)
        finally:
            rows.close()

    def _touch(self, session_id: str, now: float) -> None:
        """Mark ``session_id`` used; at most every ``PURGE_EVERY`` s delete every
        session unused for ``ttl`` (and pins past their period). Holds the mutex."""
        if now - self._swept >= min(PURGE_EVERY, self.ttl):
            self._swept = now
            cutoff = now - self.ttl
            self._db.execute(
                "DELETE FROM messages WHERE session_id IN "
                "(SELECT session_id FROM sessions WHERE used_at < ?)",
                (cutoff,),
            )
            self._db.execute("DELETE FROM sessions WHERE used_at < ?", (cutoff,))
            self._db.execute("DELETE FROM pins WHERE created_at < ?", (now - PIN_SECONDS,))
        self._db.execute("UPDATE sessions SET used_at = ? WHERE session_id = ?", (now, session_id))

    def _load(self, session_id: str) -> list[Message]:
        with self._mutex:
            self._touch(session_id, self._clock())
            cut = self._first_kept(session_id)
            if cut is None:
                return []
            rows = self._db.execute(
                "SELECT message FROM messages WHERE session_id = ? AND seq >= ? ORDER BY seq",
                (session_id, cut),
            ).fetchall()
        return [json.loads(row[0]) for row in rows]

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction, the mutex held: committed, or rolled back on any error."""
        with self._mutex:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _delete(self, session_id: str) -> bool:
        with self._transaction():
            gone = self._db.execute("DELETE FROM messages WHERE session_id = ?", (session_id,))
            self._db.execute("DELETE FROM sessions WHERE session_id = ?", (session_id,))
        return gone.rowcount > 0

    def _append(self, session_id: str, encoded: list[str]) -> None:
        now = self._clock()
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO sessions VALUES (?, ?)", (session_id, now))
            self._touch(session_id, now)
            (last,) = self._db.execute(
                "SELECT COALESCE(MAX(seq), -1) FROM messages WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            self._db.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?)",
                [(session_id, last + 1 + i, text, now) for i, text in enumerate(encoded)],
            )
            cut = self._first_kept(session_id)
            self._db.execute(
                "DELETE FROM messages WHERE session_id = ? AND seq < ?",
                (session_id, last + 1 + len(encoded) if cut is None else cut),
            )
