"""Run records shared by the fleet: when sessions live in Redis (``sessions.store:
redis``), the traces of recent runs, their ratings and the stored Responses live there too,
so rating a run (``POST /v1/traces/{id}/feedback``) and continuing a Response
(``previous_response_id``) work through any replica, and a replica's restart loses none.

Keys, all under one hash tag (``{<sessions.key_prefix>runs}``):

``…:trace:<id>`` / ``…:response:<id>``
    the record as JSON
``…:feedback:<id>``
    a trace's rating, set once (``SET NX``), deleted with its trace
``…:traces:summaries``
    a trace's line in the traces list (``GET /v1/traces``), by id: the list is the
    fleet's, read without the records
``…:traces`` / ``…:responses`` (sorted by ``…:seq``) and ``…:traces:bytes`` / ``…:responses:bytes``
    the records kept, oldest first, and their size: one script keeps at most
    ``traces.max_traces`` traces and ``traces.max_bytes`` bytes of them for the whole fleet
    (the Responses: ``MAX_RESPONSES``, ``MAX_BYTES``), dropping the oldest; a record bigger
    than the byte bound alone is not kept.

``…:spend:<agent>:<revision>`` / ``…:spend:<agent>:<revision>:<UTC day>``
    what a canary revision's runs spent on every replica, in all and per day (hashes of
    ``usd``, ``tokens`` and ``unpriced``), which ``rollout.budget`` reads when no
    Prometheus sums the fleet's; kept ``SPEND_DAYS`` days after their last addition

Ownership does not change: a record carries its owner and agent, and ``traces.py`` and
``response_store.py`` decide what a reader is shown, wherever the record came from.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

from loguru import logger

from dynagent.exceptions import ConfigError, SessionStoreUnavailable
from dynagent.registry.spend import Spend

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from dynagent.config import ServiceConfig

_KEEP = """
local size = string.len(ARGV[2])
if size > tonumber(ARGV[4]) then return 0 end
local old = redis.call('STRLEN', KEYS[4])
local total = redis.call('INCRBY', KEYS[2], size - old)
redis.call('SET', KEYS[4], ARGV[2])
if ARGV[7] ~= '' then redis.call('HSET', KEYS[5], ARGV[1], ARGV[7]) end
redis.call('ZADD', KEYS[1], redis.call('INCR', KEYS[3]), ARGV[1])
while redis.call('ZCARD', KEYS[1]) > tonumber(ARGV[3]) or total > tonumber(ARGV[4]) do
  local oldest = redis.call('ZPOPMIN', KEYS[1])[1]
  total = redis.call('DECRBY', KEYS[2], redis.call('STRLEN', ARGV[5] .. oldest))
  redis.call('DEL', ARGV[5] .. oldest, ARGV[6] .. oldest)
  redis.call('HDEL', KEYS[5], oldest)
end
return 1
"""
"""KEYS index, bytes, seq, record, summaries; ARGV id, JSON, max count, max bytes, record
key prefix, rating key prefix, summary JSON ('' for none) → 1 kept, 0 bigger than the byte
bound alone."""

_FORGET = """
local size = redis.call('STRLEN', KEYS[3])
local indexed = redis.call('ZREM', KEYS[1], ARGV[1])
if indexed == 0 and size == 0 then return 0 end
if indexed == 1 then redis.call('DECRBY', KEYS[2], size) end
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
"""
"""KEYS index, bytes, record, rating, summaries; ARGV id → 1 forgotten, 0 there was none."""

_RATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX') then return 1 end
return 0
"""
"""KEYS trace, rating; ARGV rating → 1 kept, 0 rated already, -1 the trace is gone."""


def _dumps(value: dict[str, Any]) -> str:
    """``default=str``: a value JSON has no form for (a tool's odd result) never fails a run."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


SPEND_DAYS = 30
"""Days a revision's total spend is kept after its last addition (a day's: two)."""

OUT_FOR = 1.0
"""Seconds after a failed command during which the next ones fail at once."""


class _Out(Exception):
    """Redis failed a moment ago."""


class SharedRuns:
    """Traces, ratings and stored Responses in the fleet's Redis (``sessions.url``)."""

    def __init__(
        self,
        url: str,
        *,
        key_prefix: str,
        timeout: float,
        traces: tuple[int, int],
        responses: tuple[int, int],
    ) -> None:
        """``traces`` / ``responses``: (most records, most bytes) kept for the fleet."""
        from dynagent.sessions.redis_client import connect  # the optional ``redis`` extra

        self._redis: Redis = connect(url, timeout)
        self.timeout = timeout
        self._tag = f"{{{key_prefix}runs}}:"
        self._bounds = {"trace": traces, "response": responses}
        self._out, self._out_until = "", 0.0
        self._warned = False
        self._keep = self._redis.register_script(_KEEP)
        self._rate = self._redis.register_script(_RATE)
        self._forget = self._redis.register_script(_FORGET)

    @classmethod
    def from_config(cls, config: ServiceConfig, *, responses: tuple[int, int]) -> SharedRuns | None:
        """The fleet's records when sessions live in Redis; None otherwise (each replica
        keeps its own, in memory). ``responses``: the Response store's bounds."""
        sessions = config.sessions
        if sessions.store != "redis":
            return None
        try:
            return cls(
                sessions.url,
                key_prefix=sessions.key_prefix,
                timeout=sessions.timeout,
                traces=(config.traces.max_traces, config.traces.max_bytes),
                responses=responses,
            )
        except ImportError:
            raise ConfigError(
                "sessions.store: redis needs the redis package: pip install 'dynagent[redis]'"
            ) from None

    def _key(self, kind: str, record_id: str | None = None) -> str:
        return f"{self._tag}{kind}" if record_id is None else f"{self._tag}{kind}:{record_id}"

    @asynccontextmanager
    async def _command(self, doing: str) -> AsyncIterator[None]:
        """At most ``timeout`` seconds; for ``OUT_FOR`` seconds after a failure, a failure
        at once (a run does not wait out the timeout for its trace while Redis is out)."""
        from redis.exceptions import RedisError

        from dynagent.sessions.redis_client import failure

        loop = asyncio.get_running_loop()
        why = self._out if loop.time() < self._out_until else None
        try:
            if why is not None:
                raise _Out
            async with asyncio.timeout(self.timeout):
                yield
        except (RedisError, TimeoutError) as exc:
            why = failure(exc, self.timeout)
            self._out, self._out_until = why, loop.time() + OUT_FOR
        except _Out:
            pass
        if why is not None:
            raise SessionStoreUnavailable(
                f"{doing} failed: the fleet's Redis is unavailable ({why}); retry in a moment",
                retry_after=OUT_FOR,
            )

    async def keep(
        self,
        kind: str,
        record_id: str,
        record: dict[str, Any],
        summary: dict[str, Any] | None = None,
    ) -> bool:
        """Keep a ``trace`` or ``response``, and its line in the list (``summary``); False
        when it is bigger than the byte bound."""
        most, most_bytes = self._bounds[kind]
        text = _dumps(record)
        keys = [self._key(f"{kind}s"), self._key(f"{kind}s:bytes"), self._key("seq")]
        keys += [self._key(kind, record_id), self._key(f"{kind}s:summaries")]
        args: list[str | int] = [record_id, text, most, most_bytes]
        args += [self._key(kind, ""), self._key("feedback", "")]
        args.append("" if summary is None else _dumps(summary))
        async with self._command(f"keeping a {kind}"):
            return bool(await self._keep(keys=keys, args=args))

    async def keep_quietly(
        self, kind: str, record_id: str, record: dict[str, Any], summary: dict[str, Any] | None
    ) -> bool:
        """``keep``, a failure logged (the replica still has the record in memory);
        whether the fleet has it."""
        try:
            kept = await self.keep(kind, record_id, record, summary)
        except SessionStoreUnavailable as exc:
            if not self._warned:  # once per outage, not once per run
                logger.warning("run records are kept on this replica only: {}", exc)
            self._warned = True
            return False
        self._warned = False
        return kept

    async def get(self, kind: str, record_id: str) -> dict[str, Any] | None:
        async with self._command(f"reading a {kind}"):
            text = await self._redis.get(self._key(kind, record_id))
        return None if text is None else dict(json.loads(text))

    async def forget(self, kind: str, record_id: str) -> bool:
        """Delete a kept ``trace`` or ``response`` (and a trace's rating); False when
        there was none."""
        keys = [self._key(f"{kind}s"), self._key(f"{kind}s:bytes"), self._key(kind, record_id)]
        keys += [self._key("feedback", record_id), self._key(f"{kind}s:summaries")]
        async with self._command(f"deleting a {kind}"):
            return bool(await self._forget(keys=keys, args=[record_id]))

    async def newest(
        self, kind: str, start: int, count: int
    ) -> list[tuple[str, dict[str, Any] | None]]:
        """``count`` of the records kept, from the ``start``-th newest: each id with its
        line in the list (None: kept without one)."""
        async with self._command(f"listing the {kind}s"):
            ids = cast(
                "list[bytes]",
                await self._redis.zrevrange(self._key(f"{kind}s"), start, start + count - 1),
            )
            lines = await self._redis.hmget(self._key(f"{kind}s:summaries"), ids) if ids else []
        return [
            (record_id.decode(), None if line is None else dict(json.loads(line)))
            for record_id, line in zip(ids, lines, strict=True)
        ]

    async def trace(self, trace_id: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """A kept trace and its rating, each None when there is none."""
        async with self._command("reading a trace"):
            found = await self._redis.mget(
                [self._key("trace", trace_id), self._key("feedback", trace_id)]
            )
        trace, rating = (None if text is None else dict(json.loads(text)) for text in found)
        return trace, rating

    async def rate(self, trace_id: str, rating: dict[str, Any]) -> int:
        """1 kept, 0 the run was rated already, -1 its trace is gone."""
        keys = [self._key("trace", trace_id), self._key("feedback", trace_id)]
        async with self._command("rating a run"):
            return int(await self._rate(keys=keys, args=[json.dumps(rating)]))

    async def add_spend(self, spent: Mapping[tuple[str, str, str], Spend]) -> None:
        """Add each (agent, revision, UTC day)'s spend to the revision's total and day."""
        pipe = self._redis.pipeline(transaction=False)
        for (agent, revision, day), figures in spent.items():
            total = self._key("spend", f"{agent}:{revision}")
            for key, days in ((total, SPEND_DAYS), (f"{total}:{day}", 2)):
                if figures.usd is None:
                    pipe.hset(key, "unpriced", 1)
                else:
                    pipe.hincrbyfloat(key, "usd", figures.usd)
                pipe.hincrby(key, "tokens", figures.tokens)
                pipe.expire(key, days * 86_400)
        async with self._command("adding up the canaries' spend"):
            await pipe.execute()

    async def spend(self, agent: str, revision: str, day: str | None) -> Spend:
        """A canary revision's spend on every replica: on ``day``, or in all (None)."""
        key = self._key("spend", f"{agent}:{revision}" + (f":{day}" if day else ""))
        async with self._command("reading the canaries' spend"):
            usd, tokens, unpriced = await self._redis.hmget(key, ["usd", "tokens", "unpriced"])
        return Spend(None if unpriced else float(usd or 0), int(tokens or 0))

    async def aclose(self) -> None:
        await self._redis.aclose()
