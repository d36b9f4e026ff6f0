"""The one place that talks to Nacos: nacos-sdk-python's async gRPC client for
reading, writing and listening, plus the v3 HTTP API for what the SDK lacks
(listing the dataIds of a group, logging in for it).

Everything the rest of Dynagent needs goes through ``NacosClient``; SDK errors
come out as ``NacosUnavailable`` (the server cannot be reached) or
``NacosError`` (it answered no).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

from v2.nacos import ConfigParam, NacosConfigService
from v2.nacos.common.constants import Constants
from v2.nacos.common.nacos_exception import NacosException
from v2.nacos.config.model.config_request import ConfigQueryRequest
from v2.nacos.config.model.config_response import ConfigQueryResponse

from dynagent._compat import nacos as sdk
from dynagent.config import NacosConfig
from dynagent.logs import stdlib_routed
from dynagent.nacos._fuzzy import FuzzyHub, FuzzyWatch, OnGroupChange
from dynagent.nacos._http_api import NacosError, NacosHttp, NacosUnavailable
from dynagent.nacos._sdk_config import CONNECT_TIMEOUT, sdk_config

Listener = Callable[[str, str, str, str], Awaitable[None]]
"""``(tenant, group, data_id, content)``: the SDK's argument order (checked against 3.x)."""

CONFIG_NOT_FOUND = 300
PAGE_SIZE = 500
GRAY_TAG_LABEL = Constants.VIPSERVER_TAG
"""The connection label Nacos's tag gray rules match (``Vipserver-Tag``)."""
SDK_LOGGER = logging.getLogger(Constants.CONFIG_MODULE)  # shared by every SDK client
SDK_LOGGER.addFilter(sdk.ABSENT_LOCAL_COPIES)  # once: a filter is added only if absent


class GrayAwareQueryResponse(ConfigQueryResponse):  # type: ignore[misc]
    """The SDK's query answer plus what it drops: the server sends ``beta`` (Java's
    ``isBeta()``), and ``tag`` as the matched gray rule's text, which the SDK types as
    a bool (its parse of a tag-gray answer would fail)."""

    beta: bool = False
    tag: Any = None


sdk.register_wire_types({"ConfigQueryResponse": GrayAwareQueryResponse})


@dataclass(frozen=True, slots=True)
class ConfigRead:
    """A config as Nacos serves it to this client."""

    content: str
    md5: str
    """As Nacos reports it (of the gray version when one was served)."""
    gray: str = ""
    """``beta`` or ``tag:{rule}`` when Nacos served a gray version, else empty."""
    modified: int = 0
    """When the version was written, in ms since the epoch, as the server reports it (the
    same on every node of a cluster: ``_order``); 0 when unknown."""


def content_md5(text: str) -> str:
    """The md5 Nacos reports for a config's ``text``."""
    return hashlib.md5(text.encode(), usedforsecurity=False).hexdigest()


async def _shutdown(service: Any) -> None:
    """Shut the SDK client down without waiting up to 5 s for its listen task's tick."""
    sdk.stop_listen_task(service)
    try:
        await service.shutdown()
    except asyncio.CancelledError:
        # The SDK awaits its listen task, which may end cancelled by grpc mid-request;
        # only a cancellation of the task closing us is ours to pass on.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
    except Exception:  # noqa: S110 (closing: nothing left to do about it)
        pass


class NacosClient:
    def __init__(
        self, settings: NacosConfig, *, work_dir: Path | None = None, page_size: int = PAGE_SIZE
    ) -> None:
        self.settings = settings
        self.page_size = page_size
        """Configs per request when listing a group."""
        self._http = NacosHttp(settings)
        """The v3 HTTP API, on whichever node answers."""
        self._own_work_dir = work_dir is None
        self._work_dir = work_dir
        """The SDK's cache and logs; made at the first connect when not given (off the loop)."""
        self._service: Any = None
        self._log_handlers: list[logging.Handler] = []
        self._failed_at = -CONNECT_TIMEOUT
        self._failure = ""
        """When and why the last connect failed (monotonic seconds)."""
        self._hub: FuzzyHub | None = None
        """The fuzzy watches on the current SDK connection."""
        self._hub_service: Any = None
        self._name_max: int | None = None  # the longest file name there (``cannot_hold``)

    @property
    def namespace(self) -> str:
        return self.settings.namespace

    async def connect(self) -> None:
        """Open the gRPC client; ``NacosUnavailable`` if the server does not answer in time."""
        if self._service is not None:
            return
        since = time.monotonic() - self._failed_at
        if since < CONNECT_TIMEOUT:
            # Sources sharing this client must not each wait out the timeout again.
            raise NacosUnavailable(self._failure)
        if self._work_dir is None:
            self._work_dir = Path(
                await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-nacos-")
            )
        builder = sdk_config(self.settings, self._work_dir)
        if self.settings.gray_tag:
            builder = builder.app_conn_labels({GRAY_TAG_LABEL: self.settings.gray_tag})
        before = set(SDK_LOGGER.handlers)
        service = NacosConfigService(builder.build())  # adds a file handler to SDK_LOGGER
        self._log_handlers += [h for h in SDK_LOGGER.handlers if h not in before]
        if stdlib_routed():
            # Its lines go to the service's one masking log instead (dynagent.logs), not
            # to an unmasked file of their own.
            self._release_log_handlers()
            SDK_LOGGER.propagate = True
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT):
                await sdk.start(service)
                healthy = await service.server_health()
            if not healthy:
                raise NacosUnavailable(f"cannot reach Nacos at {self.settings.server_addr}")
        except Exception as exc:
            await _shutdown(service)
            self._release_log_handlers()
            self._failed_at = time.monotonic()
            if isinstance(exc, NacosUnavailable):
                self._failure = exc.message
                raise
            # A timeout's str() is empty: say what happened instead.
            reason = (
                f"no answer within {CONNECT_TIMEOUT:g} s"
                if isinstance(exc, TimeoutError)
                else str(exc) or type(exc).__name__
            )
            self._failure = f"cannot reach Nacos at {self.settings.server_addr}: {reason}"
            raise NacosUnavailable(self._failure) from None
        self._service = service

    async def close(self) -> None:
        service, self._service = self._service, None
        if service is not None:
            await _shutdown(service)
        self._release_log_handlers()
        await self._http.close()
        if self._own_work_dir and self._work_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self._work_dir, ignore_errors=True)
            self._work_dir = None

    def _release_log_handlers(self) -> None:
        # Each SDK client adds a file handler to one process-wide logger and never
        # removes it: without this, every reconnect attempt during an outage leaks a file.
        for handler in self._log_handlers:
            SDK_LOGGER.removeHandler(handler)
            handler.close()
        self._log_handlers.clear()

    def _require(self) -> Any:
        if self._service is None:
            raise NacosUnavailable("not connected to Nacos")
        return self._service

    def cannot_hold(self, data_id: str, group: str) -> str | None:
        """Why the SDK cannot follow ``data_id`` here, or None: it keeps each config it
        listens to in a file named after dataId, group and namespace, and past the longest
        file name a failed write is retried at once, for good."""
        name = len(sdk.cache_file_name(data_id, group, self.namespace).encode())
        if self._name_max is None:
            try:
                self._name_max = os.pathconf(self._work_dir or tempfile.gettempdir(), "PC_NAME_MAX")
            except (OSError, ValueError):
                self._name_max = 255
        if name <= self._name_max:
            return None
        return (
            "dataId too long to follow here: the Nacos client's local cache names its file "
            f"after the dataId, group and namespace, {name} bytes, and file names here hold "
            f"{self._name_max}; shorten the dataId by {name - self._name_max} characters"
        )

    async def get(self, data_id: str, group: str) -> str | None:
        """The content of a config, or None when it does not exist."""
        try:
            content = await self._require().get_config(ConfigParam(data_id=data_id, group=group))
        except Exception as exc:
            raise NacosUnavailable(f"reading {group}/{data_id} failed: {exc}") from None
        return content or None

    async def read(self, data_id: str, group: str) -> ConfigRead | None:
        """The config with the md5 and gray marker Nacos reports; None when it does not
        exist. Asks the server (the SDK's ``get_config`` returns the content only)."""
        service = self._require()
        request = ConfigQueryRequest(group=group, dataId=data_id, tenant=self.namespace)
        request.put_header("notify", "false")
        try:
            response = await sdk.request_config(service, request, ConfigQueryResponse)
        except Exception as exc:
            if getattr(exc, "error_code", None) == CONFIG_NOT_FOUND:
                return None
            raise NacosUnavailable(f"reading {group}/{data_id} failed: {exc}") from None
        if not response.content:
            return None
        gray = "beta" if getattr(response, "beta", False) else ""
        tag = getattr(response, "tag", None)
        if isinstance(tag, str) and tag:  # the matched rule's text, URL-encoded by the server
            gray = f"tag:{unquote_plus(tag)}"
        modified = getattr(response, "lastModified", 0)
        modified = modified if isinstance(modified, int) and modified > 0 else 0
        return ConfigRead(response.content, response.md5 or "", gray, modified)

    async def publish(self, data_id: str, group: str, content: str, kind: str = "yaml") -> None:
        param = ConfigParam(data_id=data_id, group=group, content=content, type=kind)
        try:
            ok = await self._require().publish_config(param)
        except Exception as exc:
            raise NacosUnavailable(f"publishing {group}/{data_id} failed: {exc}") from None
        if not ok:
            raise NacosError(f"Nacos refused to publish {group}/{data_id}")

    async def publish_if(self, data_id: str, group: str, content: str, kind: str, md5: str) -> bool:
        """Publish only if the config's md5 on the server is still ``md5`` (Nacos's
        compare-and-set); False when it changed meanwhile."""
        param = ConfigParam(data_id=data_id, group=group, content=content, type=kind, cas_md5=md5)
        try:
            return bool(await self._require().publish_config(param))
        except NacosException as exc:
            if "cas" in str(exc).lower():  # "Cas publish fail, server md5 may have changed."
                return False
            raise NacosUnavailable(f"publishing {group}/{data_id} failed: {exc}") from None
        except Exception as exc:
            raise NacosUnavailable(f"publishing {group}/{data_id} failed: {exc}") from None

    async def remove(self, data_id: str, group: str) -> None:
        try:
            await self._require().remove_config(ConfigParam(data_id=data_id, group=group))
        except Exception as exc:
            raise NacosUnavailable(f"removing {group}/{data_id} failed: {exc}") from None

    async def listen(
        self, data_id: str, group: str, listener: Listener, *, announce: bool = True
    ) -> None:
        """Call ``listener`` on every change of the config. ``announce=False`` leaves telling
        the server to ``announce_listeners()``, so that many dataIds go in one request."""
        service = self._require()
        await service.add_listener(data_id, group, listener)
        if announce:
            self.announce_listeners()

    def announce_listeners(self) -> None:
        """Send the listeners added so far to the server now.

        The SDK only records a listener; the server hears of it at the SDK's next
        5-second tick, and a change made before then would arrive seconds late. Each
        announcement re-sends every listener of the client (the SDK never marks an
        unchanged one as in sync), so a bulk load announces once, not per dataId.
        """
        if self._service is not None:
            sdk.wake_listen_task(self._service)

    async def watch_group(self, group: str, on_change: OnGroupChange) -> FuzzyWatch | None:
        """Have the server push every dataId of ``group`` that appears, changes or goes
        (Nacos 3 fuzzy watch); None when the server does not support it."""
        service = self._require()
        if self._hub is None or self._hub_service is not service:
            self._hub, self._hub_service = FuzzyHub(), service
        watch = FuzzyWatch(self.namespace, group, on_change, self._hub)
        if await watch.start(service):
            return watch
        await watch.stop()
        return None

    async def unlisten(self, data_id: str, group: str, listener: Listener) -> None:
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.remove_listener(data_id, group, listener)

    async def list_group(self, group: str, data_id: str = "") -> dict[str, str]:
        """``{dataId: md5}`` of every config in ``group`` (v3 admin API; the SDK has no list),
        or of just ``data_id``. Unlike reads, the list shows a publish at once."""
        return (await self._list(group, "accurate", data_id)).get(group, {})

    async def list_groups(self, prefix: str) -> dict[str, dict[str, str]]:
        """``{group: {dataId: md5}}`` of every config in the groups named ``prefix…``."""
        found = await self._list(f"{prefix}*", "blur")
        return {group: items for group, items in found.items() if group.startswith(prefix)}

    async def _list(self, group: str, search: str, data_id: str = "") -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        page = 1
        while True:
            params = {
                "pageNo": str(page),
                "pageSize": str(self.page_size),
                "namespaceId": self.settings.namespace or "public",
                "groupName": group,
                "dataId": data_id,
                "search": search,
            }
            data = await self._http.get_json("/v3/admin/cs/config/list", params)
            items = data.get("pageItems") or []
            for item in items:
                name = str(item.get("groupName"))
                if search == "blur" or name == group:
                    found.setdefault(name, {})[str(item["dataId"])] = str(item.get("md5") or "")
            if page >= int(data.get("pagesAvailable") or 1) or not items:
                return found
            page += 1

    async def list_mcp_servers(self) -> list[dict[str, Any]]:
        """Every server of the Nacos MCP registry in the namespace (v3 admin API)."""
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            params = {
                "pageNo": str(page),
                "pageSize": str(self.page_size),
                "namespaceId": self.settings.namespace or "public",
            }
            data = await self._http.get_json("/v3/admin/ai/mcp/list", params)
            items = data.get("pageItems") or []
            found.extend(item for item in items if isinstance(item, dict))
            if page >= int(data.get("pagesAvailable") or 1) or not items:
                return found
            page += 1


__all__ = [
    "SDK_LOGGER",
    "ConfigRead",
    "GrayAwareQueryResponse",
    "Listener",
    "NacosClient",
    "NacosError",
    "NacosUnavailable",
    "content_md5",
]
