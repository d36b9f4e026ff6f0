"""Why the shared Redis is out, in its own words. The client retries a refused password or
a Sentinel that names no primary until the operation's timeout, so an outage's reason
would only ever say "did not answer in time"; one attempt without retries says what the
server, or each Sentinel, actually answered."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError


async def answer_of(client: Redis, url: str, seconds: float, *, sentinel: bool) -> str | None:
    """What one attempt, of at most ``seconds``, at the server ``url`` names (or at each
    of ``client``'s Sentinels) meets, when that is not an answer; None when it answers.
    Secrets are the caller's to mask."""
    if sentinel:
        return await _sentinels_answer(client, seconds)
    # Bounded by the timeout below, not a socket timeout (``redis_client.connect`` says why).
    once = Redis.from_url(
        url, socket_connect_timeout=seconds, socket_timeout=None, retry=Retry(NoBackoff(), 0)
    )
    try:
        async with asyncio.timeout(seconds):
            await once.ping()
    except (RedisError, TimeoutError, OSError) as exc:
        return f"the server answers {_said(exc)}"
    finally:
        await once.aclose()
    return None


async def _sentinels_answer(client: Redis, seconds: float) -> str | None:
    pool: Any = client.connection_pool
    name: str = pool.service_name
    answers: dict[str, list[str]] = {}  # an answer, and the Sentinels that gave it
    for sentinel in pool.sentinel_manager.sentinels:
        where = "{host}:{port}".format(**sentinel.connection_pool.connection_kwargs)
        try:
            async with asyncio.timeout(seconds):
                masters = await sentinel.sentinel_masters()
        except (RedisError, TimeoutError, OSError) as exc:
            answers.setdefault(_said(exc), []).append(where)
            continue
        if name in masters:
            return None  # found: the outage is the primary's own
        answers.setdefault(f"monitors no {name!r}", []).append(where)
    detail = "; ".join(f"{', '.join(wheres)}: {answer}" for answer, wheres in answers.items())
    return f"the Sentinels name no primary ({detail})"


def _said(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error)[:200]}" if str(error) else type(error).__name__
