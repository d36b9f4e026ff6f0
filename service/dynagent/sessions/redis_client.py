"""The one way Dynagent opens a client of its shared Redis (``sessions.url``): one
server, or the primary its Sentinels name now, with retries bounded for a restart or a
failover. The session store and the run records shared by the fleet use it."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dynagent.sessions.redis_url import SENTINEL_SCHEME, parse_sentinel_url

RETRIES = 12
"""Attempts per command while Redis is unreachable (a restart, a failover), each pause
doubling up to 0.25 s; the caller bounds the whole by its own timeout."""


def failure(error: BaseException, timeout: float) -> str:
    """Why a command of ``timeout`` seconds failed, as an outage's reason reads."""
    if isinstance(error, TimeoutError | RedisTimeoutError):
        return f"Redis did not answer within {timeout:g} s (sessions.timeout)"
    return f"Redis failed ({type(error).__name__})"


def connect(url: str, timeout: float) -> Redis:
    """A client of the server ``url`` names, or of the primary its Sentinels name now (asked
    again on every new connection, so a retry after a failover reaches the new one).

    Every command is bounded by its caller (``asyncio.timeout(timeout)`` around each
    operation, retries included), not by a socket timeout: given one, redis-py writes each
    command under ``asyncio.wait_for``, which on Python 3.11 returns the write's result
    instead of raising a cancellation that arrives as the write completes. A run cancelled
    then (its caller gone, its deadline passed, the service stopping) went on with its
    session's commands as if it had not been (one turn in ten in a loop of turns cancelled
    at every step). A read cut by the caller's timeout closes its connection (redis-py
    drops a connection whose reply was not read)."""
    settings: dict[str, Any] = {
        "retry": Retry(ExponentialBackoff(cap=0.25, base=0.02), RETRIES),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
        "socket_connect_timeout": timeout,
        "socket_timeout": None,  # redis-py's default is 5 s
        "health_check_interval": 30,
    }
    if not url.startswith(f"{SENTINEL_SCHEME}://"):
        return Redis.from_url(url, **settings)
    where = parse_sentinel_url(url)
    asked: dict[str, Any] = {"socket_connect_timeout": timeout, "socket_timeout": None}
    if where.sentinel_password is not None:
        asked |= {"password": where.sentinel_password, "username": where.sentinel_username}
    sentinels = Sentinel(where.sentinels, sentinel_kwargs=asked)
    primary: Redis = sentinels.master_for(
        where.service, db=where.db, password=where.password, username=where.username, **settings
    )
    return primary
