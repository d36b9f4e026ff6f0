"""The rule that keeps a Nacos dataId from going back in time, on every kind of read: one
without a time, the same content re-stamped, another gray track, a read that stays older
for longer than the patience (served then, so that a skewed clock delays an edit and
never loses it), and the times of a deleted dataId, kept a bounded while."""

from __future__ import annotations

import math

from dynagent.nacos import _order
from dynagent.nacos._order import VersionOrder
from dynagent.nacos.client import ConfigRead, content_md5


def read(content: str, modified: int, gray: str = "") -> tuple[ConfigRead, str]:
    return ConfigRead(content, content_md5(content), gray, modified), content_md5(content)


def applied(order: VersionOrder, data_id: str, content: str, modified: int, gray: str = "") -> None:
    order.applied(data_id, *read(content, modified, gray))


def test_only_a_read_modified_before_the_applied_version_of_its_track_is_refused() -> None:
    order = VersionOrder("public/g", patience=math.inf)
    assert order.admits("a", *read("v1", 1000))  # nothing applied yet: the first load
    applied(order, "a", "v2", 2000)
    assert not order.admits("a", *read("v1", 1000))
    assert order.admits("a", *read("v3", 3000))
    assert order.admits("a", *read("v1", 2500))  # a rollback: old content, a new write
    assert order.admits("a", *read("v2", 1500))  # the applied content, stamped otherwise
    assert order.admits("a", *read("v0", 0))  # the server gave no time: cannot tell
    assert order.admits("a", *read("g1", 1000, "beta"))  # a gray track has its own times
    applied(order, "a", "g2", 4000, "beta")
    assert order.admits("a", *read("v1", 2000))  # the gray removed: formal, however old
    assert not order.admits("a", *read("g1", 3000, "beta"))
    assert order.admits("b", *read("v1", 1))  # per dataId
    assert order.refused == 2


def test_a_read_older_for_longer_than_the_patience_is_served() -> None:
    order = VersionOrder("public/g", patience=0.0)
    applied(order, "a", "v2", 2000)
    assert order.admits("a", *read("v1", 1000))
    assert order.refused == 0


def test_a_deleted_data_id_keeps_its_times_a_bounded_while() -> None:
    order = VersionOrder("public/g", patience=math.inf)
    for number in range(_order.GONE_KEPT + 1):
        applied(order, f"d{number}", "v2", 2000)
        order.removed(f"d{number}")
    assert order.admits("d0", *read("v1", 1000))  # the oldest deletion, forgotten
    assert not order.admits("d1", *read("v1", 1000))
    assert order.admits("d1", *read("v3", 3000))  # re-created: a new write
    applied(order, "d1", "v3", 3000)
    assert not order.admits("d1", *read("v2", 2000))
