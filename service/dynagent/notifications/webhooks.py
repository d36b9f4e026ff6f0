"""Delivering notices: one queue and one sender per webhook, so each receiver gets its
notices in order and a slow one delays only itself.

``notify`` never waits: it claims the notice (once per fleet when the fleet shares a
Redis, else once per process: the same event seen twice, as a pull and then the pause
it writes, is sent once) and puts it on each subscribed webhook's bounded queue. The
sender POSTs it, retrying a failure (a connection error, a timeout, 408, 429 or a 5xx)
with doubling delays up to ``max_attempts``; another 4xx is final. What happened is
counted per webhook and shown in ``status()``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from loguru import logger

from dynagent.config import NotificationsConfig, WebhookConfig
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.notifications.notices import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    Notice,
    signature,
)

MAX_DELAY = 300.0
SEEN = 10_000
"""Delivery ids a process remembers to send each notice once."""
RETRIED = frozenset({408, 429})

Claim = Callable[[str], Awaitable[bool]]
"""True for the one caller in the fleet that sends this delivery id."""


@dataclass(slots=True)
class _Hook:
    config: WebhookConfig
    secret: bytes | None
    queue: asyncio.Queue[Notice]
    delivered: int = 0
    failed: int = 0
    dropped: int = 0
    retried: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def status(self) -> dict[str, Any]:
        return {
            "url": shown_url(self.config.url),
            "events": list(self.config.events),
            "format": self.config.format,
            "signed": self.secret is not None,
            "pending": self.queue.qsize(),
            "delivered": self.delivered,
            "failed": self.failed,
            "dropped": self.dropped,
            "retried": self.retried,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
        }


class Webhooks:
    """The configured webhooks of a service."""

    def __init__(
        self,
        config: NotificationsConfig,
        environ: Mapping[str, str],
        *,
        claim: Claim | None = None,
        on_result: Callable[[str], None] | None = None,
    ) -> None:
        self.hooks = [
            _Hook(hook, _secret(hook, environ, i), asyncio.Queue(config.queue))
            for i, hook in enumerate(config.webhooks)
        ]
        self._claim = claim
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._session: aiohttp.ClientSession | None = None
        self._on_result = on_result or (lambda result: None)

    @property
    def secrets(self) -> list[str]:
        """The signing keys: the service masks them like its other secrets."""
        return [h.secret.decode() for h in self.hooks if h.secret is not None]

    def notify(self, notice: Notice) -> None:
        """Queue ``notice`` for the webhooks subscribed to its event; never waits."""
        if not self.hooks or not any(notice.event in h.config.events for h in self.hooks):
            return
        delivery = notice.delivery
        if delivery in self._seen:
            return
        self._seen[delivery] = None
        if len(self._seen) > SEEN:
            self._seen.popitem(last=False)
        if self._claim is None:
            self._enqueue(notice)
        else:
            task = asyncio.get_running_loop().create_task(self._claimed(notice))
            task.add_done_callback(_log_failure)

    async def _claimed(self, notice: Notice) -> None:
        assert self._claim is not None
        try:
            mine = await self._claim(notice.delivery)
        except Exception as exc:  # the shared store out: better twice than never
            logger.warning("webhook claim failed ({}); sending {} anyway", exc, notice.event)
            mine = True
        if mine:
            self._enqueue(notice)

    def _enqueue(self, notice: Notice) -> None:
        for hook in self.hooks:
            if notice.event not in hook.config.events:
                continue
            try:
                hook.queue.put_nowait(notice)
            except asyncio.QueueFull:
                hook.dropped += 1
                self._on_result("dropped")

    def start(self) -> None:
        if not self.hooks:
            return
        self._session = aiohttp.ClientSession()
        for hook in self.hooks:
            hook.task = asyncio.get_running_loop().create_task(self._send_all(hook))

    async def aclose(self, within: float = 2.0) -> None:
        """Give the queued notices ``within`` seconds, then stop."""
        if not self.hooks:
            return
        try:
            await asyncio.wait_for(asyncio.gather(*(h.queue.join() for h in self.hooks)), within)
        except TimeoutError:
            logger.warning("stopping with {} webhook notice(s) unsent", self.pending)
        for hook in self.hooks:
            if hook.task is not None:
                hook.task.cancel()
        await asyncio.gather(*(h.task for h in self.hooks if h.task), return_exceptions=True)
        if self._session is not None:
            await self._session.close()
        closer = getattr(self._claim, "aclose", None)
        if closer is not None:
            await closer()

    def status(self) -> list[dict[str, Any]]:
        return [hook.status() for hook in self.hooks]

    @property
    def pending(self) -> int:
        return sum(h.queue.qsize() for h in self.hooks)

    async def _send_all(self, hook: _Hook) -> None:
        while True:
            notice = await hook.queue.get()
            try:
                await self._deliver(hook, notice)
            finally:
                hook.queue.task_done()

    async def _deliver(self, hook: _Hook, notice: Notice) -> None:
        body = notice.body(hook.config.format)
        headers = {
            "Content-Type": "application/json",
            EVENT_HEADER: notice.event,
            DELIVERY_HEADER: notice.delivery,
            "User-Agent": "dynagent-webhooks",
        }
        if hook.secret is not None:
            headers[SIGNATURE_HEADER] = signature(hook.secret, body)
        for attempt in range(1, hook.config.max_attempts + 1):
            error, final = await self._post(hook, body, headers)
            if error is None:
                hook.delivered += 1
                self._on_result("delivered")
                return
            hook.last_error, hook.last_error_at = error, time.time()
            if final or attempt == hook.config.max_attempts:
                break
            hook.retried += 1
            self._on_result("retried")
            delay = min(MAX_DELAY, hook.config.retry_seconds * 2 ** (attempt - 1))
            await asyncio.sleep(delay * random.uniform(0.8, 1.0))
        hook.failed += 1
        self._on_result("failed")
        logger.warning(
            "webhook {} gave up on {} of {}: {}",
            hook.status()["url"],
            notice.event,
            notice.agent,
            hook.last_error,
        )

    async def _post(
        self, hook: _Hook, body: bytes, headers: Mapping[str, str]
    ) -> tuple[str | None, bool]:
        """(why it failed, whether that is final); (None, False) when delivered."""
        assert self._session is not None
        timeout = aiohttp.ClientTimeout(total=hook.config.timeout)
        try:
            async with self._session.post(
                hook.config.url, data=body, headers=headers, timeout=timeout, allow_redirects=False
            ) as response:
                await response.content.read(4096)  # a little, never the whole of a big answer
                status = response.status
        except TimeoutError:
            return f"no answer within {hook.config.timeout:g} s", False
        except aiohttp.ClientError as exc:
            return f"{type(exc).__name__}: {exc}"[:300], False
        if 200 <= status < 300:
            return None, False
        final = 400 <= status < 500 and status not in RETRIED
        return f"HTTP {status}", final


def shown_url(url: str) -> str:
    """Scheme, host, port and path only: a query or user info may carry a token."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}{parts.path}"


def _secret(hook: WebhookConfig, environ: Mapping[str, str], index: int) -> bytes | None:
    if hook.secret_env is None:
        return None
    value = environ.get(hook.secret_env, "")
    if not value:
        raise ConfigError(
            "a webhook's signing key is not set",
            issues=[
                FieldIssue(
                    f"notifications.webhooks.{index}.secret_env",
                    f"environment variable {hook.secret_env} is not set",
                )
            ],
        )
    return value.encode()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.opt(exception=task.exception()).warning("webhook notice failed")
