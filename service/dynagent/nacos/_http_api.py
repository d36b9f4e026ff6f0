"""Nacos's v3 HTTP API, for what the SDK lacks (listing a group's dataIds, the MCP
registry's list), across every node of ``nacos.server_addr``.

A cluster answers on any node: a request goes to the node that last answered, and on a
connection failure or a server error (a node that is down, starting, or without a raft
leader) to the next, so losing one node of three costs the list no more than a retry.
"""

from __future__ import annotations

from typing import Any

import aiohttp

from dynagent.config import NacosConfig
from dynagent.exceptions import DynagentError, ErrorKind

TIMEOUT = 10.0


class NacosError(DynagentError):
    kind: ErrorKind = "unavailable"


class NacosUnavailable(NacosError):
    """The Nacos server could not be reached."""


def base_urls(settings: NacosConfig) -> tuple[str, ...]:
    """``http://host:port/nacos`` of every node in ``settings.server_addr``."""
    urls = []
    for address in settings.addresses:
        url = address if "://" in address else f"http://{address}"
        urls.append(url.rstrip("/") + "/nacos")
    return tuple(urls)


class NacosHttp:
    """GETs of the v3 API (JSON ``{code, message, data}``), logged in when credentials are set."""

    def __init__(self, settings: NacosConfig) -> None:
        self.settings = settings
        self.urls = base_urls(settings)
        self._next = 0
        """The node that answered last: tried first."""
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None

    @property
    def base_url(self) -> str:
        return self.urls[self._next]

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get_json(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        """``data`` of the answer; ``NacosUnavailable`` when no node answers, ``NacosError``
        when one answers no."""
        failures: list[str] = []
        for step in range(len(self.urls)):
            index = (self._next + step) % len(self.urls)
            try:
                data = await self._get_from(self.urls[index], path, params)
            except NacosUnavailable as exc:
                failures.append(exc.message)
                continue
            self._next = index
            return data
        raise NacosUnavailable(f"Nacos HTTP API {path} failed: {'; '.join(failures)}")

    async def _get_from(self, base: str, path: str, params: dict[str, str]) -> dict[str, Any]:
        session = self._open()
        for attempt in (1, 2):
            query = dict(params)
            if self._token:
                query["accessToken"] = self._token
            try:
                async with session.get(base + path, params=query) as response:
                    if response.status in (401, 403) and self.settings.username and attempt == 1:
                        await self._login(session, base)
                        continue
                    body = await response.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise NacosUnavailable(f"{base}: {exc or type(exc).__name__}") from None
            if response.status >= 500:
                raise NacosUnavailable(f"{base} answered {response.status}: {body}")
            if response.status != 200 or not isinstance(body, dict) or body.get("code") != 0:
                raise NacosError(f"Nacos HTTP API {path} answered {response.status}: {body}")
            data: dict[str, Any] = body.get("data") or {}
            return data
        raise NacosError(f"Nacos refused the credentials for {path}")

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT))
        return self._session

    async def _login(self, session: aiohttp.ClientSession, base: str) -> None:
        form = {"username": self.settings.username, "password": self.settings.password}
        async with session.post(base + "/v3/auth/user/login", data=form) as response:
            body = await response.json(content_type=None)
        self._token = body.get("accessToken") if isinstance(body, dict) else None
