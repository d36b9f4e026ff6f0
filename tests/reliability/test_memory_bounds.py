"""Memory is bounded in bytes: the trace store by ``traces.max_bytes``, a session's
history by ``sessions.max_history_bytes`` (newest whole turns; older ones neither loaded nor
kept), and the offline test model's answer by a total size, however its schema nests."""

from __future__ import annotations

import asyncio
import json
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

from dynagent.http.state import SERVICE
from dynagent.sessions.sqlite import SqliteSessionStore
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.service import agent_document

from .conftest import Serve

ROOT = Path(__file__).resolve().parents[2]
MB = 1_000_000


async def test_the_trace_store_is_bounded_in_bytes(serve: Serve) -> None:
    bot = agent_document("bot")  # the offline model: it echoes the input
    max_bytes = 8 * MB
    async with serve(bot, traces={"max_traces": 1000, "max_bytes": max_bytes}) as service:
        ids = []
        for i in range(6):
            response = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": f"{i}" + "x" * 900_000}
            )
            assert response.status == 200
            ids.append((await response.json())["trace_id"])
        found = [(await service.client.get(f"/v1/traces/{t}")).status for t in ids]
        store = service.app[SERVICE].traces
        kept, size = len(store), store.bytes

    print(f"\n6 traces of ~0.9 MB inputs: {kept} kept, {size / MB:.1f} MB of {max_bytes / MB} MB")
    assert size <= max_bytes
    assert found == [404] * (6 - kept) + [200] * kept
    assert kept >= 2


def _turn(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"question {i} " + "q" * 400},
        {"role": "assistant", "content": f"answer {i} " + "a" * 400},
    ]


async def test_a_session_keeps_its_newest_whole_turns_within_its_budget(tmp_path: Path) -> None:
    budget = 10_000
    store = await asyncio.to_thread(
        SqliteSessionStore, tmp_path / "sessions.db", max_history_bytes=budget
    )
    for i in range(200):
        await store.append("s1", _turn(i))
    history = await store.load("s1")
    await store.aclose()

    size = sum(len(json.dumps(m).encode()) for m in history)
    with sqlite3.connect(tmp_path / "sessions.db") as db:
        (rows,) = db.execute("SELECT COUNT(*) FROM messages").fetchone()
    print(f"\n200 turns appended: {len(history)} messages loaded ({size} bytes), {rows} stored")
    assert size <= budget
    assert history == [m for i in range(200 - len(history) // 2, 200) for m in _turn(i)]
    assert rows == len(history)  # older turns are gone from the file too


async def test_a_run_is_given_only_the_history_within_the_budget(
    serve: Serve, model_server: ScriptedModelServer
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("a" * 1500)] * 12)
    bot = agent_document("bot", model_server)
    async with serve(bot, sessions={"store": "sqlite", "max_history_bytes": 8192}) as service:
        for i in range(12):
            body = {"input": f"turn {i} " + "q" * 1500, "session_id": "s1"}
            response = await service.client.post("/v1/agents/bot/invoke", json=body)
            assert response.status == 200

    sent = model_server.requests[-1]["messages"]
    history = sent[1:-1]  # the system prompt first, this run's input last
    assert sum(len(json.dumps(m).encode()) for m in history) <= 8192
    assert history[0]["role"] == "user"
    turns = [int(m["content"].split()[1]) for m in history if m["role"] == "user"]
    print(f"\nthe 12th run was given turns {turns} of 0..10 ({len(history)} messages)")
    assert turns == list(range(11 - len(history) // 2, 11)) and len(turns) >= 2


def _limit_memory() -> None:  # the old code builds 10^9 values: stop it at 2 GB
    resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))


def test_the_offline_model_caps_its_whole_answer_not_each_level() -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.security._hostile_text", "offline-nested-arrays"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,  # about 1 s alone; the old code never ends
            check=False,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(
            "three nested arrays took over 120 s: the answer is not capped"
        ) from None
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    print(f"\nthree nested arrays of 1,000: {result}")
    assert result["peak_rss_mb"] < 500
