"""Where a served request's CPU goes, by package, in the service and in the raw floor, by
sampling (py-spy), not by tracing every call.

``bench.profile_serving --profiler cpu`` traces each call, which inflates each by the
profiler's own cost: a figure per call is exact, a share of the whole is not (small
functions weigh more than they cost). Here py-spy reads the serving thread's stack
``--rate`` times a second from outside the process, and the process's own CPU clock
(``/proc/<pid>/stat``) gives the CPU per request over the same seconds; each package's
share of the samples turns that into microseconds per request. The floor
(``bench._floor raw``) and the service are measured one after the other in one run, on
the same scripted model, the same load and concurrency.

Only the serving thread's samples count, and none taken while it waited for the network
(inside the event loop's ``select``). A sample names the function running; it is counted
to that function's package (``aiohttp``, ``asyncio``, ``pydantic``, …; ``dynagent/<part>``
for the service's own code; ``<dataclass>`` for generated ``__init__`` methods).

    .venv/bin/python -m bench.sample_serving --route invoke            # whole answers
    .venv/bin/python -m bench.sample_serving --route invoke --stream   # streamed

py-spy needs to read another process's memory (ptrace): root, or
``kernel.yama.ptrace_scope`` 0.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import yaml

from bench._load import load
from bench._process import Child, free_port
from bench._service import AGENT, Service, agent_document, write_config
from bench.profile_serving import _body

RATE = 250
"""Samples per second."""


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU so far (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def package(frame: str, modules: bool = False) -> str:
    """``name (path:line)`` → the package the path belongs to (``modules``: the service's
    own code by module)."""
    where = frame[frame.rfind("(") + 1 :].rsplit(":", 1)[0]
    if where == "<string>":
        return "<dataclass>"
    if "dynagent/" in where:
        own = where.split("dynagent/", 1)[1]
        return "dynagent/" + (own if modules else own.split("/", 1)[0]).removesuffix(".py")
    return where.split("/", 1)[0].removesuffix(".py")


def shares(raw: str, modules: bool = False) -> Counter[str]:
    """Samples per package, from py-spy's raw output, the serving thread only (the one
    running the event loop), none taken in the loop's wait for the network."""
    found: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not any("_run_once" in frame for frame in frames):
            continue  # another thread (the file watcher, a worker)
        if frames[-1].split(" (", 1)[0].endswith("select") and "selectors" in frames[-1]:
            continue
        found[package(frames[-1], modules)] += int(count)
    return found


async def sampled(
    pid: int, url: str, body: dict[str, object], seconds: float, modules: bool
) -> dict[str, float]:
    """µs of CPU per request, by package, of the process ``pid`` serving ``url``."""
    spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    await load(url, body, concurrency=8, seconds=0.5)  # warm
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        sampler = await asyncio.create_subprocess_exec(
            spy, "record", "--rate", str(RATE), "--duration", str(int(seconds)), "--format",
            "raw", "--output", out.name, "--pid", str(pid), "--nonblocking",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        used = cpu_seconds(pid)
        result = await load(url, body, concurrency=8, seconds=int(seconds))
        used = cpu_seconds(pid) - used
        _, error = await sampler.communicate()
        if sampler.returncode != 0:
            raise SystemExit(f"py-spy failed: {error.decode(errors='replace').strip()}")
        counts = shares(await asyncio.to_thread(Path(out.name).read_text), modules)
    total = sum(counts.values()) or 1
    per_request = used / max(result.ok, 1) * 1e6
    figures = {name: per_request * n / total for name, n in counts.items()}
    figures["(all)"] = per_request
    return figures


async def measure(
    route: str, stream: bool, seconds: float, modules: bool = False
) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="dynagent-sample-") as temporary:
        folder = Path(temporary)
        agents = folder / "agents"
        agents.mkdir()
        async with Child("bench._model_server") as model:
            base = model.ready["base_url"]
            async with Child("bench._floor", base, "raw") as floor:
                assert floor.process is not None
                path = "/stream" if stream else "/invoke"
                floor_url = floor.ready["url"] + path
                figures = {
                    "floor": await sampled(
                        floor.process.pid, floor_url, {"input": "ping"}, seconds, modules
                    )
                }
            (agents / f"{AGENT}.yaml").write_text(yaml.safe_dump(agent_document(base)))
            service = Service(write_config(folder, agents), free_port(), folder / "log", {})
            await service.start()
            try:
                assert service.process is not None
                path, body = _body(route, stream)
                figures["service"] = await sampled(
                    service.process.pid, service.url + path, body, seconds, modules
                )
            finally:
                await service.stop()
    return figures


def table(figures: dict[str, dict[str, float]], top: int) -> str:
    floor, service = figures["floor"], figures["service"]
    names = sorted(set(floor) | set(service) - {"(all)"}, key=lambda n: -service.get(n, 0.0))
    lines = [f"{'package':28} {'floor µs':>9} {'service µs':>11}"]
    for name in ["(all)", *[n for n in names if n != "(all)"][:top]]:
        lines.append(f"{name:28} {floor.get(name, 0.0):9.1f} {service.get(name, 0.0):11.1f}")
    own = sum(v for n, v in service.items() if n.startswith("dynagent/"))
    lines.append(
        f"CPU per request: service {service['(all)']:.1f} µs, floor {floor['(all)']:.1f} µs "
        f"({service['(all)'] / floor['(all)']:.2f}x); the service's own code {own:.1f} µs"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sample_serving")
    parser.add_argument("--route", choices=["invoke", "chat_completions"], default="invoke")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--modules", action="store_true", help="own code by module")
    args = parser.parse_args(argv)
    figures = asyncio.run(measure(args.route, args.stream, args.seconds, args.modules))
    print(table(figures, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
