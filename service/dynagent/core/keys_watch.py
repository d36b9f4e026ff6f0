"""The keys file, watched: a key added, changed or removed applies within a second,
without a restart.

Polling ``os.stat`` (a few times a second, nothing read unless it changed) rather than
watchdog: it follows every way a file is replaced — edited in place, renamed over, or a
Kubernetes Secret's symlink swap, which a folder watch does not see.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from loguru import logger

from dynagent.config import AuthConfig
from dynagent.core.auth import ApiKeys
from dynagent.deadlines import cancelled
from dynagent.exceptions import ConfigError
from dynagent.masking import SecretValues

POLL_SECONDS = 0.25
"""How often the file is looked at: a removed key stops working within this (and a read)."""

Signature = tuple[int, int, int, int, int] | None
"""What changes when the file does: inode, device, size, mtime and ctime (ns); None: gone."""


def _signature(path: Path) -> Signature:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class KeysFileWatch:
    """Reloads ``auth.keys_file`` into ``keys`` whenever it changes. A file that does not
    parse keeps the last good keys (and says so in the log); a deleted file removes its
    keys. New keys join the secrets the log and events mask."""

    def __init__(
        self,
        keys: ApiKeys,
        auth: AuthConfig,
        environ: Mapping[str, str],
        secrets: SecretValues,
    ) -> None:
        assert auth.keys_file is not None
        self.path = auth.keys_file
        self._keys, self._auth, self._environ, self._secrets = keys, auth, environ, secrets
        self._seen = _signature(self.path)
        self._changed = asyncio.Event()
        self.applied = 0
        """Reloads that took effect."""
        self.refused = 0
        """Changes that did not parse, so the last good keys stayed."""

    async def check(self) -> None:
        """Reload when the file changed since the last look (the file is looked at and read
        in a worker thread: file I/O, on a volume that may be slow)."""
        signature = await asyncio.to_thread(_signature, self.path)
        if signature == self._seen:
            return
        self._seen = signature
        try:
            fresh = await asyncio.to_thread(
                ApiKeys.load,
                self._environ,
                self._auth.keys_env,
                self.path if signature is not None else None,
                self._auth.admin_keys_env,
                self._auth.metrics_keys_env,
            )
        except ConfigError as exc:
            self.refused += 1
            logger.error("keys file not reloaded, the last good keys stay: {}", exc)
        else:
            self._secrets.add(fresh.secrets)
            self._keys.replace(fresh)
            self.applied += 1
            state = "reloaded" if signature is not None else "gone: its keys no longer work"
            logger.info("keys file {} {}", self.path, state)
        self._changed.set()
        self._changed = asyncio.Event()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Watch while the block runs."""
        task = asyncio.create_task(self._poll(), name="keys-file-watch")
        try:
            yield
        finally:
            await cancelled(task)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(POLL_SECONDS)
            await self.check()

    async def wait_for(
        self, predicate: Callable[[KeysFileWatch], bool], within: float = 10.0
    ) -> None:
        """Return once ``predicate(self)`` holds (tests await a reload this way)."""
        async with asyncio.timeout(within):
            while not predicate(self):
                await self._changed.wait()
