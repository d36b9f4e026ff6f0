"""Profile the service while it serves: ``dynagent serve`` runs under pyinstrument (a
sampling profiler, so the figures are not skewed by tracing every call), cProfile, or
cProfile on the CPU clock (``cpu``: only the CPU the serving thread spent, which a busy
machine does not skew; ``bench._cpu_profile``) in a child process, this process drives a
closed-loop load at it, and the profile's top entries (by own time and by cumulative
time) are printed, with microseconds per request.

    .venv/bin/python -m bench.profile_serving --route chat_completions --seconds 5
    .venv/bin/python -m bench.profile_serving --profiler cpu --stream --route invoke
"""

from __future__ import annotations

import argparse
import asyncio
import io
import pstats
import signal
import sys
import tempfile
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench._load import load
from bench._process import Child, free_port
from bench._service import AGENT, Service, agent_document, write_config

BODIES: dict[str, tuple[str, dict[str, object]]] = {
    "invoke": ("/v1/agents/{agent}/invoke", {"input": "ping"}),
    "chat_completions": (
        "/v1/chat/completions",
        {"model": "{agent}", "messages": [{"role": "user", "content": "ping"}]},
    ),
    "responses": ("/v1/responses", {"model": "{agent}", "input": "ping"}),
}


def _body(route: str, stream: bool) -> tuple[str, dict[str, object]]:
    path, body = BODIES[route]
    filled = {k: (AGENT if v == "{agent}" else v) for k, v in body.items()}
    return path.format(agent=AGENT), {**filled, "stream": stream}


async def profile(
    route: str,
    stream: bool,
    seconds: float,
    concurrency: int,
    top: int,
    profiler: str,
    save: Path | None = None,
) -> str:
    with tempfile.TemporaryDirectory(prefix="dynagent-profile-") as temporary:
        folder = Path(temporary)
        agents = folder / "agents"
        agents.mkdir()
        output = folder / "service.prof"
        async with Child("bench._model_server") as model:
            document = agent_document(model.ready["base_url"])
            (agents / f"{AGENT}.yaml").write_text(yaml.safe_dump(document))
            service = Service(write_config(folder, agents), free_port(), folder / "log", {})
            if profiler == "pyinstrument":
                report = ["-r", "pstats", "-o", str(output)]
                service.argv[1:3] = ["-m", "pyinstrument", *report, "-m", "dynagent"]
            elif profiler == "cpu":
                service.argv[1:3] = ["-m", "bench._cpu_profile", str(output), "dynagent"]
            else:
                service.argv[1:3] = ["-m", "cProfile", "-o", str(output), "-m", "dynagent"]
            await service.start()
            path, body = _body(route, stream)
            await load(service.url + path, body, concurrency=concurrency, seconds=0.5)
            process = service.process
            assert process is not None
            counts = await collector_counts(service.url)
            if profiler == "cpu":  # the measured load only: figures per request
                process.send_signal(signal.SIGUSR1)
            result = await load(service.url + path, body, concurrency=concurrency, seconds=seconds)
            collector = collector_per_request(
                counts, await collector_counts(service.url), result.ok
            )
            if profiler == "cpu":
                process.send_signal(signal.SIGUSR2)
                async with asyncio.timeout(30):
                    while not output.exists():  # noqa: ASYNC110 (the child's signal handler writes it)
                        await asyncio.sleep(0.05)
            process.send_signal(signal.SIGINT)
            await process.wait()
        text = io.StringIO()
        print(f"{result.ok} requests, failures {dict(result.failures)}", file=text)
        print(collector, file=text)
        stats = pstats.Stats(str(output), stream=text)
        if save is not None:
            stats.dump_stats(save)
        if profiler == "cpu":
            print(per_request(stats, result.requests, top), file=text)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        return text.getvalue()


async def collector_counts(url: str) -> tuple[float, float]:
    """The garbage collector's passes and the objects it found, all generations, so far
    (``python_gc_*`` in ``/metrics``)."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        response.raise_for_status()
        text = await response.text()
    totals = {"python_gc_collections": 0.0, "python_gc_objects_collected": 0.0}
    for family in text_string_to_metric_families(text):
        if family.name in totals:
            totals[family.name] = sum(sample.value for sample in family.samples)
    return totals["python_gc_collections"], totals["python_gc_objects_collected"]


def collector_per_request(
    before: tuple[float, float], after: tuple[float, float], requests: int
) -> str:
    """What the garbage collector did during the measured load, per request: objects the
    service leaves in reference cycles, which only the collector frees."""
    per = max(requests, 1)
    passes, found = (now - then for now, then in zip(after, before, strict=True))
    return (
        f"garbage collector: {passes * 1000 / per:.1f} passes per 1,000 requests, "
        f"{found / per:.2f} objects found in cycles per request"
    )


def per_request(stats: pstats.Stats, requests: int, top: int) -> str:
    """The top functions by own and by cumulative CPU, in microseconds per request."""
    rows = stats.stats  # type: ignore[attr-defined]
    lines = []
    for title, column in (("own", 2), ("cumulative", 3)):
        lines.append(f"-- by {title} CPU, µs per request")
        ranked = sorted(rows.items(), key=lambda item: item[1][column], reverse=True)
        for (path, line, name), figures in ranked[:top]:
            where = f"{Path(path).parent.name}/{Path(path).name}:{line}({name})"
            lines.append(f"{figures[column] * 1e6 / max(requests, 1):9.1f}  {where}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_serving")
    parser.add_argument("--route", choices=sorted(BODIES), default="chat_completions")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--top", type=int, default=30, help="cProfile entries shown")
    parser.add_argument(
        "--profiler", choices=["pyinstrument", "cProfile", "cpu"], default="pyinstrument"
    )
    parser.add_argument("--save", type=Path, help="also write the pstats file here")
    args = parser.parse_args(argv)
    report = profile(
        args.route,
        args.stream,
        args.seconds,
        args.concurrency,
        args.top,
        args.profiler,
        args.save,
    )
    print(asyncio.run(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
