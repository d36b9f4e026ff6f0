"""One bad file never stops the start, shown by real ``dynagent serve`` processes:
a Nacos snapshot file truncated mid-character is skipped and named while everything else
serves; an unreadable ``sessions.db`` is moved aside by the documented rule; a port in use
and a session path that cannot be opened are one line and exit 2, before any source loads."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.process import DYNAGENT, free_port, serve_process, write_config
from tests.support.service import agent_document

LOCAL = agent_document("local-bot", system="Served from a file.")


def _files(tmp_path: Path, **sections: Any) -> Path:
    agents = tmp_path / "agents"
    agents.mkdir(exist_ok=True)
    (agents / "local-bot.yaml").write_text(yaml.safe_dump(LOCAL), encoding="utf-8")
    return write_config(
        tmp_path,
        {
            "sessions": {"path": "state/sessions.db"},
            "factories": {"default": {"directory": "agents"}},
            **sections,
        },
    )


def _get(url: str) -> tuple[int, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, json.loads(response.read())


def _invoke(url: str, name: str, **body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{url}/v1/agents/{name}/invoke",
        data=json.dumps({"input": "hi", **body}).encode(),
        headers={"content-type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status, json.loads(response.read())


async def test_a_snapshot_file_cut_mid_character_is_skipped_and_named(tmp_path: Path) -> None:
    snapshot = tmp_path / "snapshot" / "public" / "AGENTS"
    snapshot.mkdir(parents=True)
    good = agent_document("remote-bot", system="Served from the snapshot.")
    (snapshot / "remote-bot.agent.yaml").write_text(yaml.safe_dump(good), encoding="utf-8")
    broken = yaml.safe_dump(agent_document("cut-bot", system="Grüße"), allow_unicode=True).encode()
    (snapshot / "cut-bot.agent.yaml").write_bytes(broken[: broken.index("ü".encode()) + 1])
    config = _files(
        tmp_path,
        factories={"default": {"directory": "agents"}, "nacos": True},
        nacos={"server_addr": f"127.0.0.1:{free_port()}", "snapshot_dir": "snapshot"},
    )
    async with serve_process(config, free_port()) as served:
        ready = _get(f"{served.url}/readyz")
        local = _invoke(served.url, "local-bot")
        remote = _invoke(served.url, "remote-bot")
        named = await served.wait_log("unreadable snapshot files skipped")
        served.terminate()
        assert await served.exit_code(within=20) == 0

    skipped = "cut-bot.agent.yaml (not valid UTF-8 at byte"
    assert (ready[0], ready[1]["status"], ready[1]["agents"]) == (200, "degraded", 2)
    [reason] = ready[1]["degraded"].values()
    assert skipped in reason
    assert skipped in named
    assert (local[0], remote[0]) == (200, 200)
    assert not any("Traceback" in line for line in served.log), served.log


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database" * 100)


def _truncated(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE filler (x TEXT)")
    db.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,) for _ in range(200)])
    db.commit()
    db.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", [_garbage, _truncated], ids=["garbage", "truncated"])
async def test_an_unreadable_sessions_db_is_moved_aside_and_the_service_starts(
    tmp_path: Path, damage: Any
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    damage(state / "sessions.db")
    damaged = (state / "sessions.db").read_bytes()
    config = _files(tmp_path)
    async with serve_process(config, free_port()) as served:
        line = await served.wait_log("session database")
        first = _invoke(served.url, "local-bot", session_id="s1")
        second = _invoke(served.url, "local-bot", session_id="s1")
        served.terminate()
        assert await served.exit_code(within=20) == 0

    [aside] = sorted(state.glob("sessions.db.corrupt-*"))
    assert aside.read_bytes() == damaged  # kept whole, for inspection
    assert "| ERROR " in line and f"moved aside to {aside}" in line
    assert (first[0], second[0]) == (200, 200)
    assert not any("Traceback" in entry for entry in served.log), served.log


def _refusal(config: Path, port: int) -> tuple[int, list[str]]:
    done = subprocess.run(
        [str(DYNAGENT), "serve", "--config", str(config), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Apart from the warning that auth is off (no keys in these configs), nothing else.
    lines = [line for line in done.stderr.splitlines() if "auth is OFF" not in line]
    return done.returncode, lines


def test_a_port_in_use_is_one_line_before_any_source_loads(tmp_path: Path) -> None:
    config = _files(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, lines = _refusal(config, port)

    assert code == 2
    [line] = lines
    assert line.endswith(
        f"| cannot listen on 127.0.0.1:{port}: the port is already in use; stop the other "
        "process or pick another port (--port, listen.port)"
    )


def test_a_session_path_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "state" / "sessions.db").mkdir(parents=True)  # a folder where the file goes
    code, lines = _refusal(_files(tmp_path), free_port())

    assert code == 2
    [refusal] = lines
    assert refusal.endswith(
        f"| cannot open the session database {tmp_path / 'state' / 'sessions.db'} "
        "(unable to open database file): check sessions.path"
    )
