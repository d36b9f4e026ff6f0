"""What masking secrets costs a run: ``Agent.run`` on the offline test model (a tool
call, then an answer) with the service's secret set empty (the baseline, measured in
the same run) and holding 3 and 10 secrets; plus the response middleware's cost per
body size. Prints per-run microseconds and ratios to the baseline.

    .venv/bin/python -m bench.masking            # 3 x 2,000 runs per case
    .venv/bin/python -m bench.masking --quick    # 3 x 300
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from dynagent import AgentBuilder, load_spec
from dynagent.masking import SecretValues

SPEC = {
    "name": "bench-mask",
    "model": {"provider": "test"},
    "prompt": {"system": "You are a bench agent."},
    "tools": ["calculator"],
}


def _secrets(count: int) -> SecretValues:
    return SecretValues(f"secret-value-{i:04d}-0123456789abcdef" for i in range(count))


async def _per_run(secrets: SecretValues, runs: int) -> float:
    agent = AgentBuilder(environ={}, secrets=secrets).build(load_spec(SPEC))
    for _ in range(20):  # warm-up
        await agent.run("what is 2+2?")
    started = time.process_time()
    for _ in range(runs):
        await agent.run("what is 2+2?")
    return (time.process_time() - started) / runs * 1e6


async def _runs(runs: int, rounds: int) -> dict[str, Any]:
    cases = {"no secrets": 0, "3 secrets": 3, "10 secrets": 10}
    figures: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):  # cases take turns, so a noisy machine slows them alike
        for name, count in cases.items():
            figures[name].append(await _per_run(_secrets(count), runs))
    base = statistics.median(figures["no secrets"])
    return {
        name: {
            "us_per_run": round(statistics.median(values), 1),
            "ratio_to_no_secrets": round(statistics.median(values) / base, 3),
        }
        for name, values in figures.items()
    }


def _bodies(repeat: int) -> dict[str, float]:
    secrets = _secrets(3)
    out = {}
    for size in (1_000, 100_000, 1_000_000):
        body = ("x" * 63 + "\n") * (size // 64)
        started = time.process_time()
        for _ in range(repeat):
            secrets.mask(body)
        out[f"{size} bytes"] = round((time.process_time() - started) / repeat * 1e6, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 x 300 runs per case")
    args = parser.parse_args(argv)
    runs = 300 if args.quick else 2000
    result = {
        "runs": asyncio.run(_runs(runs, rounds=3)),
        "mask_us_per_body_3_secrets": _bodies(20 if args.quick else 100),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
