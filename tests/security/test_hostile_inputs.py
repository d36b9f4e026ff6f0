"""The hostile-input run: texts up to 1 MB built to defeat regexes and parsers,
sent to every endpoint of ``/openapi.json`` and through every built-in interceptor of a real
``dynagent serve`` process, while ``/healthz`` is polled.

It reports (with ``-s``) the server CPU each request cost, read from the process's own CPU
time in ``/proc``, the slowest request, and ``/healthz``'s worst latency. Both are compared
with a floor measured in the same run, so that a slower or loaded machine moves the figure
and its limit together: the CPU that bare ``aiohttp`` takes to read the worst answer of the
run, 1 MB of PII streamed as ~150,000 one-write chunks, and do nothing with it
(``python -m bench.model_stream --floor``: 1.47 s on the machine where the bars of 1 s of
server CPU per request and 100 ms for ``/healthz`` were set, 0.63 s on another whose
worst request took 0.52 s). The assertions allow twice those bars in floor units: a
request's server CPU under 1.4 floors, ``/healthz`` under 0.7 of one. A stall (the old
15 s one) or per-chunk work on a streamed 1 MB answer (8-18 s before ``models/_sse.py``,
5-12 floors) still fails them. The mirroring model streams a 1 MB answer back as one chunk
a word, one write each: ~150,000 chunks for the PII text, and the 500,000 of the short
words are cut at ``model.max_answer_chunks`` (a ``model_error``).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from bench.model_stream import FLOOR
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.process import ServedProcess, free_port, serve_process, write_config
from tests.support.service import agent_document

KEY = "hostile-admin-key-0123456789abcdef"
BUDGET = 1_000_000  # characters of hostile text per request (bodies stay under 1 MiB)
TEXTS = {
    "word without @": "a" * BUDGET,
    "fence and spaces": "```" + " " * (BUDGET - 10) + "x",
    "full of PII": "a@b.co 555 123 4567 123-45-6789 " * (BUDGET // 33),
    "digits and brackets": "1(" * (BUDGET // 2),
    "multi-byte": "é€" * (BUDGET // 6),
    "short words": "a " * (BUDGET // 2),  # echoed as 500,000 chunks: past max_answer_chunks
}
INTERCEPTORS = [
    "pii_redaction",
    {"context_editing": {"trigger_tokens": 1000, "keep_last": 1}},
    {"tool_call_limit": {"max": 2}},
    {"model_call_limit": {"max": 5}},
    {"retry": {"max_attempts": 2}},
]
CPU_RATIO, HEALTHZ_RATIO = 1.4, 0.7
"""The limits asserted, in floors (see the module's docstring)."""
ROOT = Path(__file__).parents[2]


def _mirror(body: dict[str, Any]) -> str:
    """The hostile model: it answers with what it was sent."""
    content = body["messages"][-1].get("content")
    return content if isinstance(content, str) else json.dumps(content)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _floor_cpu() -> float:
    """CPU seconds bare aiohttp takes to read the run's worst answer, in a process of its
    own (its model in another), measured now: the unit of this run's limits."""
    reader = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.model_stream",
        "--quick",
        "--floor",
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    output, _ = await reader.communicate()
    assert reader.returncode == 0, output
    figures = json.loads(output.decode().splitlines()[-1])
    return float(figures["cpu_s"][FLOOR])


@pytest.fixture
async def served(tmp_path: Path, model_server: ScriptedModelServer) -> AsyncIterator[ServedProcess]:
    model_server.script(DEFAULT_MODEL, [Reply(_mirror)], cycle=True)
    agents = tmp_path / "agents"
    agents.mkdir()
    documents = [
        agent_document("mirror", model_server, interceptors=INTERCEPTORS),
        agent_document("judged", model_server, output={"schema": {"type": "object"}, "retries": 1}),
        agent_document("offline", tools=["calculator", "current_time"], interceptors=INTERCEPTORS),
    ]
    for document in documents:
        (agents / f"{document['name']}.yaml").write_text(yaml.safe_dump(document))
    (tmp_path / "keys.yaml").write_text(
        yaml.safe_dump({"keys": [{"name": "ops", "key": KEY, "admin": True}]})
    )
    config = write_config(
        tmp_path,
        {
            "auth": {"keys_file": "keys.yaml"},
            "sessions": {"path": "state/sessions.db"},
            "factories": {"default": {"directory": "agents"}},
        },
    )
    async with serve_process(config, free_port()) as process:
        yield process
        process.terminate()
        await process.exit_code(within=30)


def _requests(text: str, operations: list[tuple[str, str]]) -> list[tuple[str, str, Any]]:
    """(method, path, JSON body or raw text) for every operation, the text in every field."""
    short = text[:2000]  # a request line is capped at 8190 bytes by aiohttp
    found: list[tuple[str, str, Any]] = []
    for method, path in operations:
        filled = path.replace("{name}", "mirror").replace("{trace_id}", short)
        if method == "GET":
            found.append(("GET", f"{filled}?q={short}", None))
            if "{name}" in path:
                found.append(("GET", path.replace("{name}", short), None))
            continue
        if path.endswith("/invoke"):
            for name in ("mirror", "judged", "offline"):
                for stream in (False, True):
                    body = {"input": text, "stream": stream, "variables": {"v": short}}
                    found.append(("POST", path.replace("{name}", name), body))
        elif path == "/v1/chat/completions":
            for stream in (False, True):
                messages = [{"role": "user", "content": text}]
                found.append(
                    ("POST", path, {"model": "mirror", "messages": messages, "stream": stream})
                )
        else:
            found.append(("POST", filled, {"to": text}))
        found.append(("POST", filled, text))  # not JSON at all
    return found


async def _send(
    session: aiohttp.ClientSession, url: str, method: str, path: str, body: Any
) -> tuple[int, bytes]:
    data = body if isinstance(body, str) else json.dumps(body)
    async with session.request(
        method,
        url + path,
        data=None if body is None else data.encode(),
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
    ) as response:
        if method == "GET" and response.content_type == "text/event-stream":
            # A watch (``/v1/watch/agents``) never ends: its first event answers.
            return response.status, await response.content.readuntil(b"\n\n")
        return response.status, await response.read()


_PROBE = """
import http.client, sys, time
host, port = sys.argv[1].split(":")
connection = http.client.HTTPConnection(host, int(port), timeout=30)
while True:
    started = time.monotonic()
    connection.request("GET", "/healthz")
    response = connection.getresponse()
    response.read()
    ended = time.monotonic()
    print(ended, ended - started, response.status, flush=True)
    time.sleep(0.02)  # the poll interval, not a wait for the server
"""


class _HealthzProbe:
    """Polls ``/healthz`` from a process of its own: the test's event loop is busy (the
    mirroring model streams 1 MB answers from it) and must not count as the server's
    latency. ``time.monotonic`` is one clock for every process on Linux."""

    def __init__(self, url: str) -> None:
        address = url.removeprefix("http://")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _PROBE, address], stdout=subprocess.PIPE, text=True
        )
        self.polls: list[tuple[float, float]] = []
        """(when it ended, how long it took), in seconds."""

    def stop(self) -> None:
        self.process.terminate()
        output, _ = self.process.communicate(timeout=30)
        for line in output.splitlines():
            ended, took, status = line.split()
            assert status == "200", line
            self.polls.append((float(ended), float(took)))

    def worst(self, since: float, until: float) -> float:
        return max((took for ended, took in self.polls if since <= ended <= until), default=0.0)


@pytest.mark.slow
@pytest.mark.timeout(600)  # ~10 s alone: 288 requests of ~1 MB, streamed ones included
async def test_hostile_inputs_on_every_endpoint_cost_bounded_server_cpu(
    served: ServedProcess,
) -> None:
    floor = await _floor_cpu()
    pid = served.process.pid
    results: list[tuple[float, str, tuple[float, float], int]] = []
    timeout = aiohttp.ClientTimeout(total=120)
    probe = _HealthzProbe(served.url)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            document = await _send(session, served.url, "GET", "/openapi.json", None)
            paths = json.loads(document[1])["paths"]
            operations = [(m.upper(), p) for p, item in paths.items() for m in item]
            for label, text in TEXTS.items():
                for method, path, body in _requests(text, operations):
                    before, started = _cpu_seconds(pid), time.monotonic()
                    status, answer = await _send(session, served.url, method, path, body)
                    cost = _cpu_seconds(pid) - before
                    streamed = isinstance(body, dict) and body.get("stream") is True
                    what = f"{label}: {method} {path[:50]} ({'streamed' if streamed else 'plain'})"
                    results.append((cost, what, (started, time.monotonic()), status))
                    assert status != 500 and b"Traceback" not in answer, (label, path, answer[:300])
    finally:
        probe.stop()
    latencies = [took for _, took in probe.polls]

    results.sort(reverse=True)
    worst_ms = max(latencies) * 1000
    print(f"\n{len(results)} hostile requests over {len(operations)} operations; slowest:")
    for cost, what, (since, until), status in results[:6]:
        healthz = probe.worst(since, until) * 1000
        print(f"  {cost:6.2f} s CPU  {status}  {what}; /healthz {healthz:.0f} ms")
    stalled = max(results, key=lambda r: probe.worst(*r[2]))
    cpu_ratio, healthz_ratio = results[0][0] / floor, worst_ms / 1000 / floor
    print(
        f"floor (aiohttp alone reading 1 MB of PII in one-word chunks): {floor:.2f} s CPU\n"
        f"slowest: {results[0][0]:.2f} s of server CPU = {cpu_ratio:.2f} floors "
        f"(limit {CPU_RATIO})\n"
        f"/healthz worst {worst_ms:.0f} ms = {healthz_ratio:.3f} floors (limit {HEALTHZ_RATIO}) "
        f"over {len(latencies)} polls (during {stalled[1]})"
    )
    run_seconds = max(until for *_, (_, until), _ in results) - min(r[2][0] for r in results)
    assert len(latencies) >= run_seconds / 0.1, ("the /healthz probe hardly ran", run_seconds)
    assert cpu_ratio < CPU_RATIO, (floor, results[:3])
    assert healthz_ratio < HEALTHZ_RATIO, (floor, worst_ms, stalled)
