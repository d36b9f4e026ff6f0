"""Evaluation suites: what a suite run costs over plain runs of the same inputs.

A 200-case suite (every case one model call to the bench's scripted model server, through
the service's model client, and two checks) run by ``run_suite`` at concurrency 8, against
``Agent.run`` of the same 200 inputs at the same concurrency on the same agent: what the
runner adds (tools replaced, the run isolated from sessions, events collected, checks
judged, verdicts and the record) over serving the same inputs. Rounds alternate the order
(A B, B A, …); a round runs each side ``REPEATS`` times; each round's ratio is the suite's
wall (and this process's CPU) over the plain runs', and the figure is the median of the
rounds. Bar: <= 1.15x, wall and CPU per case. The same comparison on the offline model
(no HTTP, no model server) leaves the runner's own CPU per case, in microseconds: the
figure that moves when the runner does.

The gate: the service (in this process, on loopback, agents from a folder) serves the agent
with its suite; a gated canary (``rollout.gate: {}``) is written, and the time until the
registry shows its gate passed (the canary takes traffic from then) is set against the
suite's own run inside it (the gate run's start to finish). What is left is the gate's:
seeing the new canary, claiming the run by compare-and-set on its file, writing the result
back and reloading it. Each publish is a new canary revision, so each runs its gate. Bar:
<= 1 s added.

    .venv/bin/python -m bench.evals            # 15 rounds of 200 cases each side
    .venv/bin/python -m bench.evals --quick    # 5 rounds, 3 gated canaries
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp.test_utils import TestClient, TestServer

from bench._process import Child
from bench._service import agent_document
from bench._stats import summary
from bench.scenarios import REPLY_TEXT
from dynagent import Agent, AgentBuilder, Resources, load_spec
from dynagent.config import ServiceConfig
from dynagent.evals import load_suite
from dynagent.evals.runner import run_suite
from dynagent.evals.spec import EvalSuite
from dynagent.http.app import create_app
from dynagent.http.state import SERVICE
from dynagent.registry.facade import AgentRegistry

BAR = 1.15
GATE_BAR_SECONDS = 1.0
CASES = 200
CONCURRENCY = 8
REPEATS = 4
"""Runs of each side per round: a round of one 200-case run took about 25 ms once plain runs
cost 0.1 ms of CPU a case, short enough for one timer or collection to swing its ratio
from 0.3x to 1.8x."""


def suite(cases: int = CASES, answer: str = REPLY_TEXT) -> EvalSuite:
    """``cases`` cases, each one question whose answer holds ``answer``, with two checks."""
    return load_suite(
        {
            "cases": [
                {
                    "id": f"case-{number:03d}",
                    "input": f"Question {number}: answer please.",
                    "assert": [
                        {"type": "icontains", "value": answer},
                        {"type": "max-steps", "value": 2},
                    ],
                }
                for number in range(cases)
            ],
            "pass": {"min_pass_rate": 1.0},
        }
    )


async def plain_runs(agent: Agent, inputs: list[str], concurrency: int, answer: str) -> None:
    """``Agent.run`` of every input, at most ``concurrency`` at once."""
    limit = asyncio.Semaphore(concurrency)

    async def one(text: str) -> None:
        async with limit:
            result = await agent.run(text)
        if answer not in str(result.output):
            raise AssertionError(f"the plain run answered {result.output!r}")

    await asyncio.gather(*(one(text) for text in inputs))


async def timed(call: Callable[[], Awaitable[None]]) -> tuple[float, float]:
    """Wall and CPU (this process) seconds of one call."""
    gc.collect()
    started, used = time.perf_counter(), time.process_time()
    await call()
    return time.perf_counter() - started, time.process_time() - used


async def suite_against_plain(
    document: dict[str, Any], rounds: int, answer: str = REPLY_TEXT
) -> dict[str, Any]:
    resources = Resources()
    agent = AgentBuilder(resources=resources).build(load_spec(document))
    cases = suite(answer=answer)
    inputs = [case.input for case in cases.cases]

    async def evaluation() -> None:
        for _ in range(REPEATS):
            run = await run_suite(agent, cases, concurrency=CONCURRENCY)
            if run.verdict is None or not run.verdict.passed:
                raise AssertionError(f"the suite failed: {run.as_dict()['reason']}")

    async def plain() -> None:
        for _ in range(REPEATS):
            await plain_runs(agent, inputs, CONCURRENCY, answer)

    ours: list[tuple[float, float]] = []
    theirs: list[tuple[float, float]] = []
    try:
        await timed(evaluation)  # warm: connections opened, caches filled
        await timed(plain)
        # What the imports and warm-up left is moved out of the collector's way, as
        # `dynagent serve` does once started: a full collection landing in one side's
        # round would otherwise walk it (tens of ms in a round of ~40 ms).
        gc.collect()
        gc.freeze()
        for number in range(rounds):
            order = ((evaluation, ours), (plain, theirs))
            for call, into in order if number % 2 == 0 else reversed(order):
                into.append(await timed(call))
    finally:
        gc.unfreeze()
        await resources.aclose()
    return _figures(ours, theirs, len(inputs), REPEATS)


def _figures(
    ours: list[tuple[float, float]],
    theirs: list[tuple[float, float]],
    cases: int,
    repeats: int = 1,
) -> dict[str, Any]:
    wall = [a[0] / b[0] for a, b in zip(ours, theirs, strict=True)]
    cpu = [a[1] / b[1] for a, b in zip(ours, theirs, strict=True)]

    def per_case(samples: list[tuple[float, float]], index: int) -> float:
        return round(statistics.median(s[index] for s in samples) / (cases * repeats) * 1000, 4)

    wall_ratio, cpu_ratio = round(statistics.median(wall), 3), round(statistics.median(cpu), 3)
    return {
        "cases": cases,
        "repeats": repeats,
        "concurrency": CONCURRENCY,
        "rounds": len(wall),
        "suite_ms_per_case": {"wall": per_case(ours, 0), "cpu": per_case(ours, 1)},
        "plain_ms_per_case": {"wall": per_case(theirs, 0), "cpu": per_case(theirs, 1)},
        "wall_ratio": wall_ratio,
        "wall_rounds": [round(min(wall), 3), round(max(wall), 3)],
        "cpu_ratio": cpu_ratio,
        "cpu_rounds": [round(min(cpu), 3), round(max(cpu), 3)],
        "bar": BAR,
        "met": wall_ratio <= BAR and cpu_ratio <= BAR,
    }


def _gate_passed(revision: str) -> Callable[[AgentRegistry], bool]:
    def passed(registry: AgentRegistry) -> bool:
        canary = registry.status("bot").get("canary") if "bot" in registry else None
        gate = (canary or {}).get("gate") or {}
        if gate.get("revision") == revision and gate.get("state") == "failed":
            raise AssertionError(f"the gate failed: {gate.get('reason')}")
        return gate.get("revision") == revision and gate.get("state") == "passed"

    return passed


async def gate_start(model_url: str, canaries: int, cases: int = CASES) -> dict[str, Any]:
    """Seconds from writing a gated canary to its gate passing, less its suite's run."""
    with tempfile.TemporaryDirectory(prefix="bench-gate-") as folder:
        agents = Path(folder)
        config = ServiceConfig.model_validate(
            {"factories": {"default": {"directory": str(agents)}}, "sessions": {"store": "memory"}}
        )

        def write(filename: str, document: dict[str, Any]) -> None:
            text = yaml.safe_dump(document, sort_keys=False)
            (agents / filename).write_text(text, encoding="utf-8")

        stable = agent_document(model_url, name="bot")
        write("bot.yaml", stable)
        write("bot.evals.yaml", suite(cases).model_dump(mode="json", by_alias=True))
        app = create_app(config, environ={})
        async with TestClient(TestServer(app)):
            service = app[SERVICE]
            await service.registry.wait_for(lambda r: "bot" in r and "evals" in r.status("bot"))
            started, own = [], []
            for number in range(canaries):
                canary = agent_document(model_url, name="bot", system=f"Candidate {number}.")
                revision = load_spec(canary).revision
                begun = time.perf_counter()
                write("bot.canary.yaml", {**canary, "rollout": {"weight": 50, "gate": {}}})
                await service.registry.wait_for(_gate_passed(revision), within=120)
                started.append(time.perf_counter() - begun)
                gate = service.registry.status("bot")["canary"]["gate"]
                run = next(r for r in service.gate.runs if r.id == gate["run_id"])
                assert run.finished_at is not None
                own.append(run.finished_at - run.started_at)
    added = [total - suite_run for total, suite_run in zip(started, own, strict=True)]
    worst = round(max(added), 3)
    return {
        "cases": cases,
        "canaries": canaries,
        "start_s": summary(started),
        "suite_run_s": summary(own),
        "added_s": summary(added),
        "bar_s": GATE_BAR_SECONDS,
        "met": worst <= GATE_BAR_SECONDS,
    }


OFFLINE = {"name": "bot", "model": {"provider": "test"}, "prompt": {"system": "x"}}
"""The same comparison on the offline model (no HTTP, no model server): what is left of a
case's CPU is the runner's own work, in microseconds."""


async def measure(model_url: str, *, rounds: int, canaries: int = 5) -> dict[str, Any]:
    offline = await suite_against_plain(OFFLINE, rounds, "you said")
    ours, theirs = offline["suite_ms_per_case"]["cpu"], offline["plain_ms_per_case"]["cpu"]
    return {
        "suite": await suite_against_plain(agent_document(model_url), rounds),
        "runner_us_per_case": {
            "cpu": round((ours - theirs) * 1000, 1),
            "offline_plain_cpu_us": round(theirs * 1000, 1),
        },
        "gate": await gate_start(model_url, canaries),
    }


def table(data: dict[str, Any]) -> str:
    part = data["suite"]
    ours, theirs = part["suite_ms_per_case"], part["plain_ms_per_case"]
    return (
        f"{part['cases']}-case suite vs plain Agent.run, concurrency {part['concurrency']}, "
        f"{part['rounds']} rounds\n"
        f"  per case: wall {ours['wall']:.3f} vs {theirs['wall']:.3f} ms: "
        f"{part['wall_ratio']:.3f}x (rounds {part['wall_rounds'][0]:.3f}-"
        f"{part['wall_rounds'][1]:.3f}); CPU {ours['cpu']:.3f} vs {theirs['cpu']:.3f} ms: "
        f"{part['cpu_ratio']:.3f}x (rounds {part['cpu_rounds'][0]:.3f}-"
        f"{part['cpu_rounds'][1]:.3f}); bar <= {part['bar']}: "
        f"{'met' if part['met'] else 'NOT met'}\n"
        f"  the runner's own CPU per case (offline model, no HTTP): "
        f"{data['runner_us_per_case']['cpu']:.1f} us over a plain run's "
        f"{data['runner_us_per_case']['offline_plain_cpu_us']:.1f} us\n" + _gate_table(data["gate"])
    )


def _gate_table(gate: dict[str, Any]) -> str:
    added, start, own = gate["added_s"], gate["start_s"], gate["suite_run_s"]
    return (
        f"gated canary, {gate['cases']}-case suite, {gate['canaries']} publishes: written -> "
        f"gate passed median {start['median']:.3f} s, of which the suite's run "
        f"{own['median']:.3f} s; added by the gate median {added['median']:.3f} s, max "
        f"{added['max']:.3f} s; bar <= {gate['bar_s']} s: {'met' if gate['met'] else 'NOT met'}"
    )


def bars(data: dict[str, Any]) -> list[dict[str, Any]]:
    """This part's bars, as ``python -m bench`` lists them."""
    part, gate = data.get("suite"), data.get("gate")
    found = []
    if gate is not None:
        worst = gate["added_s"]["max"]
        found.append(
            {
                "bar": "gate: canary start beyond its suite, max s",
                "value": worst,
                "limit": f"<= {gate['bar_s']}",
                "met": worst <= gate["bar_s"],
            }
        )
    if part is None:
        return found
    return found + [
        {
            "bar": f"eval suite / plain runs, {name}",
            "value": part[f"{name}_ratio"],
            "limit": f"<= {part['bar']}",
            "met": part[f"{name}_ratio"] <= part["bar"],
        }
        for name in ("wall", "cpu")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()

    async def run() -> dict[str, Any]:
        async with Child("bench._model_server") as model:
            data = await measure(
                model.ready["base_url"],
                rounds=5 if args.quick else args.rounds,
                canaries=3 if args.quick else 5,
            )
            await model.stop()
        return data

    data = asyncio.run(run())
    print(table(data))
    print(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
