"""Runtime overhead per run: Dynagent's ``Agent.run`` against a hand-written loop on the
raw ``openai`` client, the same loop on one aiohttp session with plain ``json`` (the
floor), LangChain, pydantic-ai and the OpenAI Agents SDK.

Every runtime drives the same scenarios (``bench.scenarios``) against the same
scripted model server, in its own process, through the real ``openai`` client.
Runtimes take turns in batches, in a rotating order, after a warm-up, so that
a noisy machine slows them alike. Overhead is a runtime's median minus the raw
loop's. Bars: Dynagent's median within 1.15x of the raw loop's,
its overhead at most half of LangChain's and pydantic-ai's, and its client CPU per run
at most 2x the floor's (``CPU x floor``).

    .venv/bin/python -m bench.overhead            # 300 runs per runtime and scenario
    .venv/bin/python -m bench.overhead --quick    # 40
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench._process import Child
from bench._stats import ratio, summary
from bench.runtimes import PEERS, RUNTIMES, Runtime
from bench.scenarios import SCENARIOS, Scenario

BAR_RATIO = 1.15
BAR_PEER_SHARE = 0.5
"""Dynagent's overhead over the raw loop at most this share of a bar peer's."""
BAR_PEERS = ("langchain", "pydantic_ai")
BAR_FLOOR_CPU = 2.0
"""Dynagent's client CPU per run at most this multiple of the aiohttp floor loop's."""
RESULTS = Path(__file__).parent / "results" / "overhead.json"


async def _timed(
    runtime: Runtime, scenario: Scenario, count: int, cpu: list[float] | None = None
) -> list[float]:
    """Wall-clock ms of ``count`` runs; the CPU ms this thread spent on each go to ``cpu``."""
    times = []
    for _ in range(count):
        cpu_started, started = time.thread_time(), time.perf_counter()
        output = await runtime.run(scenario.question)
        times.append((time.perf_counter() - started) * 1000)
        if cpu is not None:
            cpu.append((time.thread_time() - cpu_started) * 1000)
        if output != scenario.answer:
            raise AssertionError(f"{runtime.name} answered {output!r}, not {scenario.answer!r}")
    return times


async def _start(names: list[str], base_url: str, scenario: Scenario) -> dict[str, Runtime]:
    runtimes: dict[str, Runtime] = {}
    for name in names:
        try:
            runtimes[name] = await RUNTIMES[name](base_url, scenario)
        except ImportError as exc:
            print(f"  {name}: not installed ({exc}); pip install -e '.[bench]'", file=sys.stderr)
    return runtimes


async def measure_scenario(
    scenario: Scenario, base_url: str, names: list[str], runs: int, batch: int, warmup: int
) -> dict[str, Any]:
    runtimes = await _start(names, base_url, scenario)
    times: dict[str, list[float]] = {name: [] for name in runtimes}
    cpu: dict[str, list[float]] = {name: [] for name in runtimes}
    try:
        for runtime in runtimes.values():
            await _timed(runtime, scenario, warmup)
        # What the imports and warm-up left is moved out of the collector's way: a full
        # collection before each turn then takes milliseconds, not ~0.2 s.
        gc.collect()
        gc.freeze()
        order = list(runtimes)
        for index in range(-(-runs // batch)):
            shift = index % len(order)
            for name in order[shift:] + order[:shift]:
                gc.collect()
                times[name] += await _timed(
                    runtimes[name], scenario, min(batch, runs - len(times[name])), cpu[name]
                )
    finally:
        gc.unfreeze()
        for runtime in runtimes.values():
            await runtime.close()
    return _scenario_report(scenario, runtimes, times, cpu)


def _scenario_report(
    scenario: Scenario,
    runtimes: dict[str, Runtime],
    times: dict[str, list[float]],
    cpu: dict[str, list[float]],
) -> dict[str, Any]:
    figures: dict[str, dict[str, Any]] = {name: summary(values) for name, values in times.items()}
    raw = figures["raw"]
    raw_cpu = statistics.median(cpu["raw"])
    floor_cpu = statistics.median(cpu["floor"]) if "floor" in cpu else None
    report: dict[str, Any] = {"title": scenario.title, "model_calls": scenario.model_calls}
    for name, figure in figures.items():
        figure["cpu_median"] = round(statistics.median(cpu[name]), 3)
        figure["cpu_ratio"] = ratio(figure["cpu_median"], raw_cpu)
        figure["cpu_ratio_to_floor"] = (
            ratio(figure["cpu_median"], floor_cpu) if floor_cpu is not None else None
        )
        figure["ratio_median"] = ratio(figure["median"], raw["median"])
        figure["ratio_p95"] = ratio(figure["p95"], raw["p95"])
        figure["overhead_ms"] = round(figure["median"] - raw["median"], 3)
        figure["version"] = runtimes[name].version
    report["runtimes"] = figures
    report["bars"] = _bars(figures)
    return report


def _bars(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ours = figures.get("dynagent")
    if ours is None:
        return {}
    bars: dict[str, Any] = {
        "ratio_to_raw": {
            "value": ours["ratio_median"],
            "bar": BAR_RATIO,
            "met": ours["ratio_median"] <= BAR_RATIO,
        },
    }
    if ours.get("cpu_ratio_to_floor") is not None:
        cpu = ours["cpu_ratio_to_floor"]
        bars["cpu_to_floor"] = {"value": cpu, "bar": BAR_FLOOR_CPU, "met": cpu <= BAR_FLOOR_CPU}
    for peer in BAR_PEERS:
        theirs = figures.get(peer)
        if theirs is None:
            bars[f"half_of_{peer}"] = {"met": None, "why": "not installed"}
            continue
        share = ours["overhead_ms"] / theirs["overhead_ms"] if theirs["overhead_ms"] > 0 else 0.0
        bars[f"half_of_{peer}"] = {
            "value": round(share, 3),
            "bar": BAR_PEER_SHARE,
            "met": share <= BAR_PEER_SHARE,
        }
    return bars


async def measure(
    base_url: str,
    *,
    runs: int,
    batch: int = 5,
    warmup: int = 20,
    names: list[str] | None = None,
) -> dict[str, Any]:
    names = names or list(RUNTIMES)
    scenarios = {}
    for scenario in SCENARIOS:
        scenarios[scenario.key] = await measure_scenario(
            scenario, base_url, names, runs, batch, warmup
        )
    return {
        "what": "ms per run, median and p95 over runs; ratio and overhead against the raw "
        "loop; CPU: ms of this process's CPU per run (median), less sensitive to other load",
        "runs": runs,
        "batch": batch,
        "warmup": warmup,
        "scenarios": scenarios,
    }


def table(data: dict[str, Any]) -> str:
    lines = []
    for scenario in data["scenarios"].values():
        lines.append(f"{scenario['title']}; {data['runs']} runs each")
        lines.append(
            f"  {'runtime':16}{'median ms':>11}{'p95 ms':>10}{'x raw':>8}{'p95 x':>8}"
            f"{'overhead ms':>13}{'CPU ms':>9}{'CPU x':>7}{'CPU x floor':>12}"
        )
        for name, f in scenario["runtimes"].items():
            lines.append(
                f"  {name:16}{f['median']:>11.3f}{f['p95']:>10.3f}{f['ratio_median']:>8.3f}"
                f"{f['ratio_p95']:>8.3f}{f['overhead_ms']:>13.3f}{f['cpu_median']:>9.3f}"
                f"{f['cpu_ratio']:>7.3f}{f.get('cpu_ratio_to_floor') or 0:>12.3f}"
            )
        for bar, verdict in scenario["bars"].items():
            state = {True: "met", False: "NOT met", None: "n/a"}[verdict["met"]]
            value = verdict.get("value")
            lines.append(f"  bar {bar}: {value} (bar {verdict.get('bar')}): {state}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=300, help="runs per runtime and scenario")
    parser.add_argument("--quick", action="store_true", help="40 runs")
    parser.add_argument("--batch", type=int, default=5, help="runs per runtime before switching")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs per runtime first")
    parser.add_argument("--only", nargs="*", choices=list(RUNTIMES), help="runtimes to run")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    runs = 40 if args.quick else args.runs
    names = args.only or list(RUNTIMES)
    for reference in ("floor", "raw"):
        if reference not in names:
            names.insert(0, reference)

    async def run() -> dict[str, Any]:
        async with Child("bench._model_server") as model:
            return await measure(
                model.ready["base_url"],
                runs=runs,
                batch=args.batch,
                warmup=args.warmup,
                names=names,
            )

    data = asyncio.run(run())
    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["PEERS", "measure", "table"]
