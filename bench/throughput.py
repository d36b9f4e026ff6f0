"""Service throughput: requests/s, p99 and server CPU per request of
``POST /v1/agents/{name}/invoke`` and ``POST /v1/chat/completions`` (``--responses`` adds
``POST /v1/responses``), whole and streamed, at concurrency 8 and 32, against two
references making the same one model call (whole against whole, streamed against streamed):

- ``floor``: the physical floor, a bare aiohttp handler forwarding the call with
  aiohttp's client and plain ``json`` (``bench._floor raw``); every ratio is to it;
- ``sdk_proxy``: the same handler making the call through the ``openai`` SDK
  (``bench._floor sdk``), so paying the SDK's own cost;
- ``floor_connections`` (``--connections-floor``): the floor making its call on the
  service's own model connections (aiohttp's client protocol and parser without its
  session, ``bench._floor connections``): what the service costs beside a floor that calls
  the model as it does;
- ``floor_uvloop`` (``--uvloop-floor``): the floor on uvloop's event loop, to read beside
  the service on uvloop (``--event-loop uvloop``): what the loop alone takes off;
- ``floor_workN`` (``--work-floors N …``): the floor spending N µs more CPU per request in
  plain Python, which turns the bars into a budget of microseconds (``bench._budget``):
  what the service may add to forwarding the call, and what it adds now;
- ``floor_featured`` (``--featured-floor``, whole answers only): the floor plus the least
  each per-request feature of the default configuration costs (``bench._featured``):
  what the features themselves ask of that budget;
- ``ROUTE_flat`` and ``ROUTE_flat_bare`` (``--flat-run``, whole answers only): the service
  with the run path and the runtime made one function for these runs (``bench._flat_serve``),
  with the records a run ends with, and without them: what the layers cost, and what the
  records do.

The service (``dynagent serve``, default configuration), both references and the
scripted model server each run in their own process on loopback; the load generator is
this process. Targets take turns at each level so that noise hits them alike. Bars: the
service's server CPU per request at most 1.5x the floor's, and its requests/s at least
0.8x the floor's, at each level, whole and streamed.

    .venv/bin/python -m bench.throughput            # 8, 32 concurrent; 2 x 4 s per target
    .venv/bin/python -m bench.throughput --quick    # 2 x 1 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench._budget import budget, budget_lines, work_name
from bench._load import LoadResult, load
from bench._process import Child, cpu_seconds, free_port
from bench._service import AGENT, Service, agent_document, write_config
from bench._stats import ratio, summary
from bench.scenarios import REPLY_TEXT

LEVELS = (8, 32)
BAR_CPU_RATIO = 1.5
"""The service's server CPU per request at most this multiple of the floor's."""
BAR_RPS_RATIO = 0.8
"""The service's requests per second at least this share of the floor's."""
RESULTS = Path(__file__).parent / "results" / "throughput.json"


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    url: str
    body: dict[str, Any]
    pid: int
    """The server process, whose CPU per request is measured too."""


ROUTES: dict[str, tuple[str, dict[str, Any]]] = {
    "invoke": (f"/v1/agents/{AGENT}/invoke", {"input": "ping"}),
    "chat_completions": (
        "/v1/chat/completions",
        {"model": AGENT, "messages": [{"role": "user", "content": "ping"}]},
    ),
    "responses": ("/v1/responses", {"model": AGENT, "input": "ping", "store": False}),
}
WHOLE_ONLY = frozenset({"floor_featured"})
"""Floors that serve whole answers only."""
BAR_ROUTES = ("invoke", "chat_completions")
"""The routes the bars hold for."""


def targets(
    service: Service,
    floors: dict[str, Child],
    routes: tuple[str, ...],
    *,
    stream: bool,
    flat: dict[str, Service] | None = None,
) -> list[Target]:
    """The floors and the service's routes, all streamed or none; the raw floor comes
    first. ``flat``: the flat-run services by the suffix their routes' names take (whole
    answers only)."""
    floor_path = "/stream" if stream else "/invoke"
    suffix = "_stream" if stream else ""
    chosen = [
        Target(name + suffix, child.ready["url"] + floor_path, {"input": "ping"}, child.pid)
        for name, child in floors.items()
        if not (stream and name in WHOLE_ONLY)
    ]
    services = {suffix: service, **({} if stream else (flat or {}))}
    for ending, serving in services.items():
        for name in routes:
            path, body = ROUTES[name]
            url, sent = serving.url + path, {**body, "stream": stream}
            chosen.append(Target(name + ending, url, sent, serving.pid))
    return chosen


async def _turn(target: Target, level: int, seconds: float) -> tuple[LoadResult, float]:
    """One turn of load; also the server's CPU seconds it took."""
    cpu = cpu_seconds(target.pid)
    result = await load(target.url, target.body, concurrency=level, seconds=seconds)
    return result, cpu_seconds(target.pid) - cpu


async def _check(target: Target) -> None:
    """One request first: the target answers, and answers what the model said."""
    result = await load(target.url, target.body, concurrency=1, seconds=0.2)
    if result.failures or not result.ok:
        raise RuntimeError(f"{target.name} failed: {dict(result.failures)}")


async def measure(
    targets_: list[Target], *, levels: tuple[int, ...], seconds: float, rounds: int
) -> dict[str, Any]:
    for target in targets_:
        await _check(target)
        await load(target.url, target.body, concurrency=8, seconds=0.5)  # warm-up
    figures: dict[str, dict[str, Any]] = {}
    for level in levels:
        results = {target.name: LoadResult() for target in targets_}
        cpu = dict.fromkeys(results, 0.0)
        for index in range(rounds):
            shift = index % len(targets_)
            for target in targets_[shift:] + targets_[:shift]:
                result, seconds_cpu = await _turn(target, level, seconds)
                results[target.name].merge(result)
                cpu[target.name] += seconds_cpu
        figures[str(level)] = _level(results, cpu)
    return figures


def _level(results: dict[str, LoadResult], cpu: dict[str, float]) -> dict[str, Any]:
    level: dict[str, Any] = {}
    for name, result in results.items():
        latency = summary(result.latencies_ms)
        level[name] = {
            "server_cpu_ms_per_request": round(cpu[name] * 1000 / max(result.requests, 1), 3),
            "rps": round(result.ok / result.seconds, 1),
            "p50_ms": latency.get("median"),
            "p99_ms": latency.get("p99"),
            "requests": result.requests,
            "failed": sum(result.failures.values()),
            "failures": dict(result.failures),
        }
    floor = next(iter(level.values()))  # targets() puts the floor first
    for figure in level.values():
        figure["rps_ratio_to_floor"] = ratio(figure["rps"], floor["rps"])
        figure["p50_ratio_to_floor"] = ratio(figure["p50_ms"], floor["p50_ms"])
        figure["p99_ratio_to_floor"] = ratio(figure["p99_ms"], floor["p99_ms"])
        figure["cpu_ratio_to_floor"] = ratio(
            figure["server_cpu_ms_per_request"], floor["server_cpu_ms_per_request"]
        )
    return level


def bars(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each route's CPU and requests/s against the floor's, at each level, whole and streamed."""
    found = []
    for key in ("levels", "streamed_levels"):
        for level, figures in data[key].items():
            for name, figure in figures.items():
                if name.removesuffix("_stream") not in BAR_ROUTES:
                    continue
                cpu, rps = figure["cpu_ratio_to_floor"], figure["rps_ratio_to_floor"]
                found.append(
                    {
                        "bar": f"{name} at {level}: CPU/request / floor's",
                        "value": cpu,
                        "limit": f"<= {BAR_CPU_RATIO}",
                        "met": cpu <= BAR_CPU_RATIO,
                    }
                )
                found.append(
                    {
                        "bar": f"{name} at {level}: req/s / floor's",
                        "value": rps,
                        "limit": f">= {BAR_RPS_RATIO}",
                        "met": rps >= BAR_RPS_RATIO,
                    }
                )
    return found


def _flat_services(config: Path, folder: Path) -> dict[str, Service]:
    """The service with its runs made flat (``bench._flat_serve``), records kept and not."""
    return {
        f"_flat{ending}": Service(
            config,
            free_port(),
            folder / f"service-flat-{mode}.log",
            {},
            module=("bench._flat_serve", mode),
        )
        for mode, ending in (("records", ""), ("bare", "_bare"))
    }


async def run(
    model_url: str,
    *,
    levels: tuple[int, ...],
    seconds: float,
    rounds: int,
    routes: tuple[str, ...] = BAR_ROUTES,
    uvloop_floor: bool = False,
    connections_floor: bool = False,
    event_loop: str = "asyncio",
    works: tuple[int, ...] = (),
    featured: bool = False,
    flat: bool = False,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="dynagent-bench-") as temporary:
        folder = Path(temporary)
        agents = folder / "agents"
        agents.mkdir()
        (agents / f"{AGENT}.yaml").write_text(yaml.safe_dump(agent_document(model_url)))
        config = write_config(folder, agents, extra={"listen": {"event_loop": event_loop}})
        service = Service(config, free_port(), folder / "service.log", {})
        floors = {"floor": Child("bench._floor", model_url, "raw")}
        floors["sdk_proxy"] = Child("bench._floor", model_url, "sdk")
        if connections_floor:
            floors["floor_connections"] = Child("bench._floor", model_url, "connections")
        if uvloop_floor:
            floors["floor_uvloop"] = Child("bench._floor", model_url, "raw", "uvloop")
        if featured:
            floors["floor_featured"] = Child("bench._featured", model_url)
        for micros in works:
            floors[work_name(micros)] = Child("bench._floor", model_url, "raw", f"work={micros}")
        flats = _flat_services(config, folder) if flat else {}
        async with service, AsyncExitStack() as stack:
            for child in floors.values():
                await stack.enter_async_context(child)
            for flat_service in flats.values():
                await stack.enter_async_context(flat_service)
            figures = {
                kind: await measure(
                    targets(service, floors, routes, stream=kind == "streamed", flat=flats),
                    levels=levels,
                    seconds=seconds,
                    rounds=rounds,
                )
                for kind in ("whole", "streamed")
            }
    data: dict[str, Any] = {
        "what": "closed loop: N workers each send the next request when the last answers; "
        "server CPU per request from /proc (user + system), less sensitive to other load; "
        "ratios to the raw floor (aiohttp client, plain json) measured in the same run",
        "seconds_per_target_and_level": seconds * rounds,
        "service_event_loop": event_loop,
        "reply": REPLY_TEXT,
        "levels": figures["whole"],
        "streamed_levels": figures["streamed"],
    }
    if works:
        data["budgets"] = {
            kind: {
                level: budget(
                    level_figures,
                    works,
                    (*routes, "floor_featured"),
                    cpu_ratio=BAR_CPU_RATIO,
                    rps_ratio=BAR_RPS_RATIO,
                    suffix=suffix,
                )
                for level, level_figures in figures[kind].items()
            }
            for kind, suffix in (("whole", ""), ("streamed", "_stream"))
        }
    return data


def table(data: dict[str, Any]) -> str:
    lines = [
        f"{'conc':>5} {'target':28}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'failed':>8}"
        f"{'rps/floor':>11}{'p99/floor':>11}{'CPU ms/req':>12}{'CPU/floor':>11}"
    ]
    for key in ("levels", "streamed_levels"):
        for level, figures in data[key].items():
            for name, f in figures.items():
                lines.append(
                    f"{level:>5} {name:28}{f['rps']:>9.1f}{f['p50_ms']:>9.2f}{f['p99_ms']:>9.2f}"
                    f"{f['failed']:>8}{f['rps_ratio_to_floor']:>11.3f}"
                    f"{f['p99_ratio_to_floor']:>11.3f}"
                    f"{f['server_cpu_ms_per_request']:>12.3f}{f['cpu_ratio_to_floor']:>11.3f}"
                )
    for kind, budgets in data.get("budgets", {}).items():
        lines.extend(budget_lines(budgets, kind))
    for verdict in bars(data):
        state = "met" if verdict["met"] else "NOT met"
        lines.append(f"bar {verdict['bar']}: {verdict['value']} ({verdict['limit']}): {state}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="2 x 1 s per target and level")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per turn")
    parser.add_argument("--rounds", type=int, default=2, help="turns per target and level")
    parser.add_argument("--levels", type=int, nargs="+", default=list(LEVELS))
    parser.add_argument("--responses", action="store_true", help="also POST /v1/responses")
    parser.add_argument(
        "--uvloop-floor", action="store_true", help="also the floor on uvloop's event loop"
    )
    parser.add_argument(
        "--connections-floor",
        action="store_true",
        help="also the floor calling the model on the service's own connections",
    )
    parser.add_argument(
        "--event-loop",
        choices=["asyncio", "uvloop"],
        default="asyncio",
        help="the service's listen.event_loop (asyncio, as shipped)",
    )
    parser.add_argument(
        "--work-floors",
        type=int,
        nargs="*",
        default=[],
        metavar="US",
        help="also the floor with this many µs of work added per request (e.g. 50 100 200)",
    )
    parser.add_argument(
        "--featured-floor",
        action="store_true",
        help="also the floor plus the least each feature costs (whole answers)",
    )
    parser.add_argument(
        "--flat-run",
        action="store_true",
        help="also the service with its run path made one function, with and without "
        "the records a run ends with (whole answers)",
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    seconds = 1.0 if args.quick else args.seconds

    async def main_async() -> dict[str, Any]:
        async with Child("bench._model_server") as model:
            return await run(
                model.ready["base_url"],
                levels=tuple(args.levels),
                seconds=seconds,
                rounds=args.rounds,
                routes=(*BAR_ROUTES, "responses") if args.responses else BAR_ROUTES,
                uvloop_floor=args.uvloop_floor,
                connections_floor=args.connections_floor,
                event_loop=args.event_loop,
                works=tuple(args.work_floors),
                featured=args.featured_floor,
                flat=args.flat_run,
            )

    data = asyncio.run(main_async())
    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
