"""Sessions in Redis: one conversation shared by every replica behind a load balancer.

Keys of session ``S`` (``S`` is the key the store is given; scoping by caller and
agent is composed above this layer), all in one cluster hash slot:

``{prefix}{S}:turns``
    a list with one element per run: the JSON array of the messages it added, so
    the history budget drops whole turns and never splits a tool call from its result
``{prefix}{S}:bytes``
    the size of those elements, for the budget
``{prefix}{S}:lock``
    ``"{token}:{nonce}"`` of the replica running the session now, with a TTL that the
    holder renews; a crashed replica's lock simply expires
``{prefix}{S}:fence`` / ``:written``
    the newest fencing token handed out, and the newest that wrote: a holder whose lock
    expired and was taken over can no longer append (``SessionConflict``)

Each of them expires ``sessions.ttl`` after the session's last use: every write and
every read renews them, so an abandoned conversation leaves nothing behind.

Every write is one Lua script, atomic on the server; the client retries on a dropped
connection (a Redis restart), and the scripts are idempotent for that retry.

Under Sentinel (``redis+sentinel://``) every new connection asks the Sentinels for the
primary, so the retries of a write during a failover reach the promoted replica. Each
lock token and each turn is followed, on its connection, by ``WAIT 1``: it counts as
written only once a replica holds it, so the replica promoted next has every turn that
was answered and every fencing token handed out (a stale holder's token never comes
back and stays fenced off).

Each operation has ``timeout`` seconds, retries included; past them Redis is out: the
operation raises ``SessionStoreUnavailable`` (503 ``unavailable``), and so does every
operation after it, at once, until a ping every ``PROBE_EVERY`` seconds finds Redis back.
A run never waits out a retry budget per command while Redis is down, and neither do the
runs beside it. ``watch_health`` reports each change (and a ping every ``HEALTH_EVERY``
seconds finds an outage on a replica that has no session traffic).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from loguru import logger
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from dynagent.deadlines import cancelled
from dynagent.exceptions import SessionConflict, SessionStoreUnavailable
from dynagent.models.base import Message
from dynagent.sessions._redis_diagnosis import answer_of
from dynagent.sessions._redis_scripts import ACQUIRE, APPEND, FORGET, RELEASE, RENEW
from dynagent.sessions.base import DEFAULT_SESSION_TTL, SessionLocks
from dynagent.sessions.redis_client import connect, failure
from dynagent.sessions.redis_url import SENTINEL_SCHEME, secrets_of

PIN_SECONDS = 30 * 24 * 3600
"""How long a session's variant is remembered (a canary rarely lives longer)."""
TIMEOUT = 2.0
"""``sessions.timeout``: seconds one store operation may take, retries included."""
PROBE_EVERY = 0.5
"""Seconds between pings while Redis is out: the first run after it returns gets it."""
HEALTH_EVERY = 5.0
"""Seconds between pings while Redis answers (only under ``watch_health``)."""

HealthListener = Callable[[str | None], None]
"""Told why the store is out, or None when it answers again."""


class _NoReplica(RedisError):
    """Under Sentinel, no replica acknowledged a write: a failover now could lose it."""


@dataclass(frozen=True, slots=True)
class _Hold:
    token: int
    value: str


class RedisSessionStore:
    """Sessions on a Redis server (``redis://`` or ``rediss://`` URL)."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str = "dynagent:session:",
        lock_ttl: float = 15.0,
        history_bytes: int = 0,
        ttl: float = DEFAULT_SESSION_TTL,
        timeout: float = TIMEOUT,
    ) -> None:
        self._redis = connect(url, timeout)
        self.replicated = url.startswith(f"{SENTINEL_SCHEME}://")
        self._url = url
        self._secrets = secrets_of(url)
        """Under Sentinel: a lock token or a turn counts as written once a replica has it
        (``WAIT``), so a failover never loses one; without a replica it is unavailable."""
        self.timeout = timeout
        """Seconds one operation may take, retries included, before Redis counts as out."""
        self.outage: str | None = None
        """Why Redis is out, while it is: every operation fails at once meanwhile."""
        self._listeners: list[HealthListener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._probing = False
        self.key_prefix = key_prefix
        self.lock_ttl = lock_ttl
        """Seconds a holder's lock outlives its last renewal (renewed every third of it)."""
        self.history_bytes = history_bytes
        """Oldest turns are dropped past this many bytes of history (0: no budget); the
        newest turn is always kept."""
        self.ttl = ttl
        """Seconds a session's keys live after its last use."""
        self._locks = SessionLocks()
        self._acquire = self._redis.register_script(ACQUIRE)
        self._renew = self._redis.register_script(RENEW)
        self._release = self._redis.register_script(RELEASE)
        self._append = self._redis.register_script(APPEND)
        self._forget = self._redis.register_script(FORGET)
        self._holds: dict[str, _Hold] = {}

    def _key(self, session_id: str, what: str) -> str:
        return f"{self.key_prefix}{{{session_id}}}:{what}"

    @asynccontextmanager
    async def _command(self, doing: str) -> AsyncIterator[None]:
        """One operation: at once ``SessionStoreUnavailable`` while Redis is out, else at
        most ``timeout`` seconds; a failure marks Redis out."""
        if self.outage is not None:
            raise _unavailable(doing, self.outage)
        try:
            async with asyncio.timeout(self.timeout):
                yield
        except (RedisError, TimeoutError) as exc:
            reason = self._why(exc)
            self._set_outage(reason)
            raise _unavailable(doing, reason) from None

    def _why(self, error: Exception) -> str:
        if isinstance(error, _NoReplica):
            return "no replica of the Redis primary took the write in time (WAIT 1)"
        return failure(error, self.timeout)

    def _set_outage(self, reason: str | None) -> None:
        if (reason is None) == (self.outage is None):
            return
        self.outage = reason
        if reason is None:
            logger.info("the session store answers again: runs with a session are served")
        else:
            logger.warning(
                "the session store is out: {}; runs with a session answer 503 until it answers",
                reason,
            )
        for listener in self._listeners:
            listener(reason)
        if reason is not None and not self._probing:
            self._probing = True
            self._start(self._probe())
        if reason is not None:
            self._start(self._diagnose(reason))

    async def _diagnose(self, reason: str) -> None:
        """What the server (or each Sentinel) answers one attempt without retries, added
        to the outage's reason: the retries end in a timeout that hides a refused password."""
        said = await answer_of(self._redis, self._url, self.timeout, sentinel=self.replicated)
        if said is None or self.outage != reason:  # it answers, or this outage is over
            return
        for secret in self._secrets:
            said = said.replace(secret, "***")
        self.outage = f"{reason}; {said[:600]}"
        logger.warning("the session store is out: {}", self.outage)
        for listener in self._listeners:
            listener(self.outage)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answers(self) -> str | None:
        """None when Redis answers a ping within ``timeout``, else why not."""
        try:
            async with asyncio.timeout(self.timeout):
                await self._redis.ping()
        except (RedisError, TimeoutError) as exc:
            return self._why(exc)
        return None

    async def _probe(self) -> None:
        """Ping while Redis is out; the first answer ends the outage."""
        try:
            while self.outage is not None:
                await asyncio.sleep(PROBE_EVERY)
                if await self._answers() is None:
                    self._set_outage(None)
        finally:
            self._probing = False

    def watch_health(self, listener: HealthListener) -> None:
        """Tell ``listener`` of every outage and recovery; Redis is pinged every
        ``HEALTH_EVERY`` seconds, so an outage shows without session traffic too."""
        self._listeners.append(listener)
        if len(self._listeners) == 1:
            self._start(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(HEALTH_EVERY)
            if self.outage is None:
                reason = await self._answers()
                if reason is not None:
                    self._set_outage(reason)

    async def load(self, session_id: str) -> list[Message]:
        ttl_ms = max(1, int(self.ttl * 1000))
        async with self._command("reading"), self._redis.pipeline(transaction=False) as both:
            both.lrange(self._key(session_id, "turns"), 0, -1)
            for what in ("turns", "bytes", "written", "fence"):  # a read renews it
                both.pexpire(self._key(session_id, what), ttl_ms)
            turns, *_ = await both.execute()
        messages: list[Message] = []
        for turn in turns:
            messages.extend(json.loads(turn))
        return messages

    async def append(self, session_id: str, messages: Sequence[Message]) -> None:
        if not messages:
            return
        hold = self._holds.get(session_id)
        if hold is None:  # outside a run's lock (tools, imports): take it for this write
            async with self.lock(session_id):
                await self.append(session_id, messages)
            return
        keys = [self._key(session_id, k) for k in ("turns", "bytes", "written", "lock", "fence")]
        turn = json.dumps(list(messages), ensure_ascii=False)
        ttl_ms = max(1, int(self.ttl * 1000))
        async with self._command("saving"):
            args = [hold.token, hold.value, turn, self.history_bytes, ttl_ms]
            result, kept = await self._write(self._append, keys, args)
            if not kept:
                raise _NoReplica
        if int(result) < 0:
            raise SessionConflict(
                f"session {session_id!r} was taken over by another run after this one's lock "
                f"expired (lock_ttl {self.lock_ttl:g} s); this turn was not saved: retry it"
            )

    async def delete(self, session_id: str) -> bool:
        async with self.lock(session_id):  # after the run that holds it: its turn goes too
            hold = self._holds[session_id]
            keys = [self._key(session_id, k) for k in ("turns", "bytes", "written", "lock")]
            args = [hold.token, hold.value, max(1, int(self.ttl * 1000))]
            async with self._command("deleting"):
                result, kept = await self._write(self._forget, keys, args)
                if not kept:
                    raise _NoReplica
        if result < 0:
            raise SessionConflict(
                f"session {session_id!r} was taken over by another run while it was being "
                "deleted; it was not deleted: retry"
            )
        return result > 0

    async def _write(
        self, script: AsyncScript, keys: list[str], args: list[Any]
    ) -> tuple[int, bool]:
        """Run a write script: its result, and whether a replica has the write too. Under
        Sentinel the script goes on the same connection as ``WAIT 1`` (a token or turn
        reported written must still be there after a failover); else it is just run."""
        if not self.replicated:
            return int(await script(keys=keys, args=args)), True
        async with self._redis.pipeline(transaction=False) as both:
            await script(keys=keys, args=args, client=both)
            both.wait(1, max(1, int(self.timeout * 500)))
            result, acked = await both.execute()
        return int(result), int(acked) >= 1

    def lock(self, session_id: str) -> AbstractAsyncContextManager[None]:
        return self._hold(session_id)

    @asynccontextmanager
    async def _hold(self, session_id: str) -> AsyncIterator[None]:
        async with self._locks.hold(session_id):  # one waiter per replica polls Redis
            hold = await self._take(session_id)
            self._holds[session_id] = hold
            renewing = asyncio.create_task(self._keep(session_id, hold))
            try:
                yield
            finally:
                try:
                    await cancelled(renewing)  # raises a cancellation of the turn meanwhile
                finally:  # after the lock is let go
                    del self._holds[session_id]
                    await self._let_go(session_id, hold.value)

    async def _let_go(self, session_id: str, value: str) -> None:
        """Release the lock; if it cannot be now (an outage, the turn cancelled), later."""
        try:
            released = await self._unlock(session_id, value)
        except BaseException:
            self._start(self._unlock_later(session_id, value, at_once=True))
            raise
        if not released:
            self._start(self._unlock_later(session_id, value))

    async def _unlock(self, session_id: str, value: str) -> bool:  # ``value``, or its nonce
        with contextlib.suppress(SessionStoreUnavailable):
            async with self._command("unlocking"):
                await self._release(keys=[self._key(session_id, "lock")], args=[value])
            return True
        return False

    async def _unlock_later(self, session_id: str, value: str, *, at_once: bool = False) -> None:
        """A release lost to an outage (a failover) is tried again once Redis answers, so
        the session is free then, not when the lock expires ``lock_ttl`` later; ``at_once``:
        first now (a turn cut off as it took or let go of the lock: Redis likely answers)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.lock_ttl
        if at_once and self.outage is None and await self._unlock(session_id, value):
            return
        while loop.time() < until:
            await asyncio.sleep(PROBE_EVERY)
            if self.outage is None and await self._unlock(session_id, value):
                return

    async def _take(self, session_id: str) -> _Hold:
        """Wait for the session's lock (bounded by the run's own timeout)."""
        nonce = uuid.uuid4().hex
        keys = [self._key(session_id, "lock"), self._key(session_id, "fence")]
        pause = 0.005
        while True:
            async with self._command("locking"):
                try:
                    token, kept = await self._write(self._acquire, keys, [self._ttl_ms, nonce])
                except BaseException:  # cut off (cancelled, timed out): Redis may have given it
                    self._start(self._unlock_later(session_id, nonce, at_once=True))
                    raise
                if not kept:  # a token a failover could hand out again: give it back
                    if token > 0:
                        await self._release(keys=keys[:1], args=[f"{token}:{nonce}"])
                    raise _NoReplica
            if token > 0:
                return _Hold(token, f"{token}:{nonce}")
            await asyncio.sleep(pause)  # another replica runs this session: poll, backing off
            pause = min(pause * 2, 0.1)

    async def _keep(self, session_id: str, hold: _Hold) -> None:
        """Renew the lock while the run goes on; losing it is caught by the fence at append."""
        key = self._key(session_id, "lock")
        while True:
            await asyncio.sleep(self.lock_ttl / 3)
            with contextlib.suppress(SessionStoreUnavailable):
                async with self._command("renewing the lock of"):
                    if not await self._renew(keys=[key], args=[hold.value, self._ttl_ms]):
                        return

    @property
    def _ttl_ms(self) -> int:
        return max(1, int(self.lock_ttl * 1000))

    async def pin(self, key: str, value: str) -> str:
        name = f"{self.key_prefix}pin:{key}"
        async with self._command("pinning"):
            await self._redis.set(name, value, nx=True, ex=PIN_SECONDS)
            found = await self._redis.get(name)
        if found is None:
            return value
        return found.decode() if isinstance(found, bytes) else str(found)

    async def ping(self) -> None:
        """Raise ``SessionStoreUnavailable`` unless Redis answers (now, outage or not)."""
        reason = await self._answers()
        self._set_outage(reason)
        if reason is not None:
            raise _unavailable("reaching", reason)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._redis.aclose()


def _unavailable(doing: str, reason: str) -> SessionStoreUnavailable:
    return SessionStoreUnavailable(
        f"{doing} the session failed: the session store is unavailable ({reason}); "
        "retry in a moment",
        retry_after=PROBE_EVERY,
    )
