"""Versions of a dataId only forwards: a read older than the version applied is not served.

In a Nacos cluster each node serves configs from its own copy, which a raft follower
updates as it applies the log. After the leader is lost, a client that reconnects to a
node still behind the log hears from it an older version of a dataId than the one it
applied (the SDK's md5 check and the group listing both see "changed"); served, the agent
would go back in time until the node catches up. So the source keeps, per dataId, the
server's modification time of the version it applied, and refuses a read modified before
it: the lagging node's own push, once it catches up, or the next reconcile brings the
newer version.

Where the time comes from (Nacos 3 source, embedded storage): the node that takes a write
stamps it with its clock (``EmbeddedConfigInfoPersistServiceImpl``, ``System.
currentTimeMillis()``) and puts the stamp into the raft log entry itself
(``EmbeddedStorageContextUtils.onModifyConfigInfo``: a dump event with
``lastModifiedTs``), so every node's cache reports the same ``lastModified`` for a version
whenever it applies it; ``ConfigCacheService.dump`` itself ignores a dump older than what
it holds. A config query answers with that cache's time (``ConfigQueryResponse.
lastModified``); the group listing's ``modifyTime`` would be each node's database row,
whose ``gmt_modified`` is ``CURRENT_TIMESTAMP`` as that node applies the entry (and Nacos
3.1's list leaves it 0). Seen on three loopback nodes: writes through each node read back
with the writer's stamp on all three, save a node that had just re-stamped (35 ms later).

Two approximations remain. Every 30 s a node re-stamps its current version with that row
time (``DumpChangeConfigWorker``): milliseconds after the write's stamp, or seconds for a
node that applied it late; and the nodes' clocks may disagree when different nodes took
two edits. Either can make a newer version look older: a read that stays older than the
applied version for ``PATIENCE_SECONDS`` is then taken as the truth and served (with a
warning), so an edit is late at worst, never lost. Or, rarely, an older one look newer (a
node re-stamped while still behind): served until the next version. A version's time is
the one it was first applied with (a re-stamp of the same content does not move it). A
read without a time (0) or of the same md5 is never refused.

A person's rollback publishes the old content again: a new write, a new time, served.
A gray version (beta, tag) has times of its own: each track (``ConfigRead.gray``) is
ordered apart, so removing a gray rule serves the formal version again, however old.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from loguru import logger

from dynagent.nacos.client import ConfigRead

PATIENCE_SECONDS = 60.0
"""How long a dataId's reads may stay older than its applied version before they are
served anyway: longer than a lagging node takes to catch up, and than Nacos's 30 s
re-stamping of current versions."""

GONE_KEPT = 1024
"""Deleted dataIds whose last time is kept, so that a node that missed the deletion does
not bring back a version older than the one deleted."""


@dataclass(frozen=True, slots=True)
class Applied:
    modified: int
    """Milliseconds since the epoch, as the server reported it."""
    md5: str


Tracks = dict[str, Applied]
"""A dataId's versions applied, by gray marker (empty: the formal version)."""


class VersionOrder:
    """The newest version applied per dataId and track, and the reads refused as older."""

    def __init__(
        self,
        location: str,
        on_refused: Callable[[], None] = lambda: None,
        patience: float = PATIENCE_SECONDS,
    ) -> None:
        self.location = location
        self.on_refused = on_refused
        self.patience = patience
        self.refused = 0
        """Reads refused as older than the version applied."""
        self._applied: dict[str, Tracks] = {}
        self._gone: OrderedDict[str, Tracks] = OrderedDict()
        self._since: dict[str, float] = {}
        """Per dataId: when its reads started to be older than the version applied."""

    def admits(self, data_id: str, read: ConfigRead, md5: str) -> bool:
        """Whether ``read`` (content md5 ``md5``) may be served: not older than the version
        applied on its track, or older for longer than the patience."""
        tracks = self._applied.get(data_id) or self._gone.get(data_id) or {}
        applied = tracks.get(read.gray)
        if (
            applied is None
            or not read.modified
            or read.modified >= applied.modified
            or md5 == applied.md5
        ):
            self._since.pop(data_id, None)
            return True
        first = data_id not in self._since
        since = self._since.setdefault(data_id, time.monotonic())
        if time.monotonic() - since >= self.patience:
            logger.warning(
                "{}/{}: Nacos has served a version modified at {} ms instead of the one "
                "applied, modified at {} ms, for {:g} s: serving it",
                self.location,
                data_id,
                read.modified,
                applied.modified,
                self.patience,
            )
            self._since.pop(data_id, None)
            return True
        self.refused += 1
        self.on_refused()
        (logger.info if first else logger.debug)(
            "{}/{}: Nacos served an older version (modified at {} ms, the one served here at "
            "{} ms), as a node behind the others does: kept the newer one",
            self.location,
            data_id,
            read.modified,
            applied.modified,
        )
        return False

    def applied(self, data_id: str, read: ConfigRead, md5: str) -> None:
        """``read`` is the version of ``data_id`` handed on now."""
        self._since.pop(data_id, None)
        if not read.modified:
            return
        tracks = self._applied.get(data_id)
        if tracks is None:
            tracks = self._applied[data_id] = self._gone.pop(data_id, {})
        tracks[read.gray] = Applied(read.modified, md5)

    def removed(self, data_id: str) -> None:
        """``data_id`` was deleted: its times are kept a while (``GONE_KEPT``)."""
        self._since.pop(data_id, None)
        tracks = self._applied.pop(data_id, None)
        if tracks:
            self._gone[data_id] = tracks
            while len(self._gone) > GONE_KEPT:
                self._gone.popitem(last=False)
