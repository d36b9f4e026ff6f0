"""The run families as plain numbers write what ``prometheus_client``'s own Counter and
Histogram write for the same increments and observations, save the creation times."""

from __future__ import annotations

import re
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from dynagent.core.tallies import Spreads, Tallies

BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
OBSERVED = (0.0, 0.01, 0.010001, 0.3, 1, 7.5, 120, 121, 1e9, 0.049999)


def _text(registry: CollectorRegistry) -> str:
    """The exposition with each ``_created`` sample's time left out."""
    text = generate_latest(registry).decode()
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text)


def test_counters_and_histograms_write_what_prometheus_client_writes() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    labels = ("agent", "variant")
    counter = Counter("runs", "Runs.", labels, registry=theirs)
    tallies = Tallies("runs", "Runs.", labels, registry=ours)
    histogram = Histogram("took_seconds", "Took.", labels, buckets=BUCKETS, registry=theirs)
    spreads = Spreads("took_seconds", "Took.", labels, buckets=BUCKETS, registry=ours)
    for index, seconds in enumerate(OBSERVED):
        key = ("a" if index % 3 else "b", "stable" if index % 2 else "canary")
        counter.labels(*key).inc(index + 0.5)
        tallies.labels(*key).inc(index + 0.5)
        histogram.labels(*key).observe(seconds)
        spreads.labels(*key).observe(seconds)
    counter.remove("b", "canary")
    tallies.remove("b", "canary")

    assert "took_seconds_bucket" in _text(ours)
    assert _text(ours) == _text(theirs)


def test_a_second_family_of_a_name_is_refused() -> None:
    registry = CollectorRegistry()
    Tallies("runs", "Runs.", ("agent",), registry=registry)
    with pytest.raises(ValueError, match="Duplicated"):
        Counter("runs", "Runs.", ("agent",), registry=registry)


def test_a_scrape_on_another_thread_reads_while_series_are_added() -> None:
    registry = CollectorRegistry()
    tallies = Tallies("runs", "Runs.", ("agent",), registry=registry)
    done = threading.Event()
    failures: list[BaseException] = []

    def scrape() -> None:
        while not done.is_set():
            try:
                generate_latest(registry)
            except BaseException as exc:  # reported below
                failures.append(exc)
                return

    reader = threading.Thread(target=scrape)
    reader.start()
    try:
        for index in range(20_000):
            tallies.labels(f"agent-{index}").inc()
    finally:
        done.set()
        reader.join()
    assert not failures
    assert generate_latest(registry).count(b"runs_total{") == 20_000
