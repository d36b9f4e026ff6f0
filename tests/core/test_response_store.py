"""Stored Responses are bounded in count and in bytes, and the conversation a response
carries on is cut to the history budget, so a ``previous_response_id`` chain never
grows past it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dynagent.core.auth import Caller
from dynagent.core.response_store import ResponseStore, StoredResponse
from dynagent.exceptions import ResponseNotFound

OWNER = Caller("key", principal="key:key")


def stored(n: int, messages: list[Any] | None = None, text: str = "ok") -> StoredResponse:
    body = {"id": f"resp_{n}", "output_text": text}
    return StoredResponse(body, tuple(messages or []), owner=OWNER.principal, agent="bot")


def test_the_oldest_go_past_the_byte_budget_and_the_total_stays_within_it() -> None:
    store = ResponseStore(max_responses=1000, max_bytes=10_000)
    for n in range(50):
        store.put(stored(n, text="x" * 900))
        assert store.bytes <= 10_000
    assert 5 <= len(store) < 50
    with pytest.raises(ResponseNotFound):
        store.get("resp_0", OWNER)
    assert store.get("resp_49", OWNER).body["output_text"] == "x" * 900


def test_the_count_still_bounds_small_responses() -> None:
    store = ResponseStore(max_responses=3)
    for n in range(5):
        store.put(stored(n))
    assert [len(store)] == [3]
    with pytest.raises(ResponseNotFound):
        store.get("resp_1", OWNER)


def test_a_chain_keeps_only_its_newest_whole_turns_within_the_history_budget() -> None:
    store = ResponseStore(history_bytes=2_000)
    messages: list[Any] = []
    for n in range(100):
        messages = (
            [
                *store.get(f"resp_{n - 1}", OWNER).messages,
                {"role": "user", "content": f"question {n} " + "q" * 300},
                {"role": "assistant", "content": f"answer {n} " + "a" * 300},
            ]
            if n
            else [
                {"role": "user", "content": "question 0 " + "q" * 300},
                {"role": "assistant", "content": "answer 0 " + "a" * 300},
            ]
        )
        store.put(stored(n, messages))
    kept = store.get("resp_99", OWNER).messages
    size = sum(len(json.dumps(m, ensure_ascii=False).encode()) for m in kept)
    turn = size // (len(kept) // 2)  # every turn here has the same size
    assert size <= 2_000 < size + turn  # as many whole turns as fit, no more
    numbers = [int(m["content"].split()[1]) for m in kept[::2]]
    assert kept[0]["role"] == "user"
    assert numbers == list(range(100 - len(numbers), 100))


def test_a_response_is_read_only_by_the_key_that_made_it_and_by_admins() -> None:
    store = ResponseStore()
    store.put(stored(1))
    for stranger in (
        Caller("other", principal="key:other"),
        Caller("narrow admin", frozenset({"other-agent"}), admin=True, principal="key:a"),
    ):
        with pytest.raises(ResponseNotFound):
            store.get("resp_1", stranger)
    admin = Caller("admin", admin=True, principal="key:admin")
    assert store.get("resp_1", admin) == store.get("resp_1", OWNER)
