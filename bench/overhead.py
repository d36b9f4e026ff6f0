"""Runtime overhead: Dynagent's ``Agent.run`` against a hand-written loop on the raw client.

Both drive the same three-step scenario against the same in-process scripted
model server, through the real ``openai`` client:

1. the model asks for two tool calls (run concurrently),
2. then for one more,
3. then answers.

Runs alternate in batches so that a noisy machine slows both sides alike. The
bar (DESIGN.md): Dynagent's median run within 1.15x of the raw loop's.

    .venv/bin/python -m bench.overhead            # 300 runs each
    .venv/bin/python -m bench.overhead --quick    # 50 runs each
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import openai
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from service import Agent, AgentBuilder, Resources, Tool, ToolRegistry, load_spec
from tests.support.scripted_model import CallTools, Reply, ScriptedModelServer, Step

BAR = 1.15
MODEL = "bench-model"
SYSTEM = "You are a benchmark agent."
QUESTION = "Look up a and b, then combine them."
ANSWER = "The answer is AB."
RESULTS = Path(__file__).parent / "results" / "overhead.json"

SCRIPT: list[Step] = [
    CallTools([("lookup", {"key": "a"}), ("lookup", {"key": "b"})]),
    CallTools([("combine", {"left": "A", "right": "B"})]),
    Reply(ANSWER),
]


async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def combine(left: str, right: str) -> str:
    """Join two values."""
    return left + right


TOOLS = (Tool.from_function(lookup), Tool.from_function(combine))
RAW_TOOLS: list[ChatCompletionToolParam] = [
    {"type": "function", "function": tool.definition.to_openai()["function"]} for tool in TOOLS
]
FUNCTIONS: dict[str, Callable[..., Awaitable[str]]] = {"lookup": lookup, "combine": combine}

RunOnce = Callable[[], Awaitable[object]]


def dynagent_agent(base_url: str, resources: Resources) -> Agent:
    spec = load_spec(
        {
            "name": "bench",
            "model": {"provider": "openai", "base_url": base_url, "api_key": "k", "name": MODEL},
            "prompt": {"system": SYSTEM},
            "tools": [tool.name for tool in TOOLS],
        }
    )
    registry = ToolRegistry.default({tool.name: tool for tool in TOOLS})
    return AgentBuilder(tools=registry, resources=resources, environ={}).build(spec)


async def raw_loop(client: openai.AsyncOpenAI, question: str) -> str | None:
    """The minimal ReAct loop a developer would write on the raw client."""
    messages: list[ChatCompletionMessageParam] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    for _ in range(8):
        completion = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=RAW_TOOLS, parallel_tool_calls=True, timeout=30
        )
        message = completion.choices[0].message
        calls = [call for call in message.tool_calls or () if call.type == "function"]
        if not calls:
            return message.content
        messages.append(
            {
                "role": "assistant",
                "content": message.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.function.name,
                            "arguments": call.function.arguments,
                        },
                    }
                    for call in calls
                ],
            }
        )
        outputs = await asyncio.gather(
            *(
                FUNCTIONS[call.function.name](**json.loads(call.function.arguments))
                for call in calls
            )
        )
        for call, output in zip(calls, outputs, strict=True):
            messages.append({"role": "tool", "tool_call_id": call.id, "content": output})
    raise RuntimeError("no answer")


async def timed(run: RunOnce, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await run()
        times.append((time.perf_counter() - started) * 1000)
    return times


def summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "min_ms": round(ordered[0], 3),
    }


async def measure(runs: int, batch: int, warmup: int) -> dict[str, Any]:
    async with ScriptedModelServer() as server:
        server.script(MODEL, SCRIPT, cycle=True)
        resources = Resources()
        raw_client = openai.AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        agent = dynagent_agent(server.base_url, resources)

        async def dynagent_once() -> object:
            result = await agent.run(QUESTION)
            assert result.output == ANSWER, result.output
            return result

        async def raw_once() -> object:
            output = await raw_loop(raw_client, QUESTION)
            assert output == ANSWER, output
            return output

        sides: dict[str, RunOnce] = {"dynagent": dynagent_once, "raw": raw_once}
        times: dict[str, list[float]] = {name: [] for name in sides}
        try:
            for run in sides.values():
                await timed(run, warmup)
            rounds = -(-runs // batch)
            for index in range(rounds):
                order = list(sides) if index % 2 == 0 else list(reversed(sides))
                for name in order:
                    gc.collect()
                    times[name] += await timed(sides[name], min(batch, runs - len(times[name])))
        finally:
            await raw_client.close()
            await resources.aclose()
        server.assert_no_errors()
        server.assert_complete()
    return {name: summary(values) for name, values in times.items()}


def report(results: dict[str, Any], runs: int) -> dict[str, Any]:
    raw, ours = results["raw"], results["dynagent"]
    ratio = round(ours["median_ms"] / raw["median_ms"], 3)
    return {
        "scenario": "3 model calls: 2 parallel tool calls, 1 tool call, answer",
        "runs": runs,
        "raw": raw,
        "dynagent": ours,
        "ratio_median": ratio,
        "ratio_p95": round(ours["p95_ms"] / raw["p95_ms"], 3),
        "overhead_median_ms": round(ours["median_ms"] - raw["median_ms"], 3),
        "bar": BAR,
        "within_bar": ratio <= BAR,
        "python": platform.python_version(),
        "openai": openai.__version__,
        "machine": platform.platform(),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def table(data: dict[str, Any]) -> str:
    raw, ours = data["raw"], data["dynagent"]
    lines = [
        f"{data['scenario']}; {data['runs']} runs each",
        f"{'':10}{'median ms':>12}{'p95 ms':>12}{'mean ms':>12}",
        f"{'raw':10}{raw['median_ms']:>12.3f}{raw['p95_ms']:>12.3f}{raw['mean_ms']:>12.3f}",
        f"{'dynagent':10}{ours['median_ms']:>12.3f}{ours['p95_ms']:>12.3f}{ours['mean_ms']:>12.3f}",
        f"{'ratio':10}{data['ratio_median']:>12.3f}{data['ratio_p95']:>12.3f}",
        f"bar: median ratio <= {BAR}: {'met' if data['within_bar'] else 'NOT met'}"
        f" (overhead {data['overhead_median_ms']:.3f} ms per run)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=300, help="runs per side (default 300)")
    parser.add_argument("--quick", action="store_true", help="50 runs per side")
    parser.add_argument("--batch", type=int, default=10, help="runs per side before switching")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs per side first")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 when the bar is not met")
    args = parser.parse_args(argv)
    runs = 50 if args.quick else args.runs

    data = report(asyncio.run(measure(runs, args.batch, args.warmup)), runs)

    print(table(data))
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written to {args.output}")
    return 1 if args.check and not data["within_bar"] else 0


if __name__ == "__main__":
    sys.exit(main())
