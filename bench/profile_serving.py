"""Profile the service while it serves: ``dynagent serve`` runs under pyinstrument (a
sampling profiler, so the figures are not skewed by tracing every call) or cProfile in a
child process, this process drives a closed-loop load at it, and the profile's top
entries (by own time and by cumulative time) are printed.

    .venv/bin/python -m bench.profile_serving --route chat_completions --seconds 5
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

import yaml

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
    route: str, stream: bool, seconds: float, concurrency: int, top: int, profiler: str
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
            else:
                service.argv[1:3] = ["-m", "cProfile", "-o", str(output), "-m", "dynagent"]
            await service.start()
            path, body = _body(route, stream)
            await load(service.url + path, body, concurrency=concurrency, seconds=0.5)
            result = await load(service.url + path, body, concurrency=concurrency, seconds=seconds)
            process = service.process
            assert process is not None
            process.send_signal(signal.SIGINT)
            await process.wait()
        text = io.StringIO()
        print(f"{result.ok} requests, failures {dict(result.failures)}", file=text)
        stats = pstats.Stats(str(output), stream=text)
        stats.sort_stats("tottime").print_stats(top)
        stats.sort_stats("cumulative").print_stats(top)
        return text.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile_serving")
    parser.add_argument("--route", choices=sorted(BODIES), default="chat_completions")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--top", type=int, default=30, help="cProfile entries shown")
    parser.add_argument("--profiler", choices=["pyinstrument", "cProfile"], default="pyinstrument")
    args = parser.parse_args(argv)
    report = profile(
        args.route, args.stream, args.seconds, args.concurrency, args.top, args.profiler
    )
    print(asyncio.run(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
