"""Two or more service trees serving side by side, taking turns: what one change did to the
server's CPU per request, measured closer than ``bench.throughput`` can on a shared machine.

Each tree (a ``PYTHONPATH`` put before the installed package: a ``git worktree``'s
``service`` folder, or ``-`` for the installed one) runs its own ``dynagent serve`` on the
same scripted model, all at once; the load (c = 8 by default) goes to each in turn for a
short time, over many rounds, in alternating order. A minute of the machine's noise then
falls on every tree alike. Give a tree twice to see the noise: the same tree's two
processes differ by it.

    git worktree add /tmp/before <rev>
    .venv/bin/python -m bench.side_by_side /tmp/before/service - /tmp/before/service -
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench._load import load
from bench._process import Child, cpu_seconds, free_port
from bench._service import AGENT, Service, agent_document, write_config
from bench.profile_serving import BODIES, _body


@dataclass
class Turns:
    """One tree's turns: CPU seconds and requests answered, in all and each."""

    tree: str
    cpu: float = 0.0
    answered: int = 0
    each: list[float] = field(default_factory=list)
    """µs a request, per turn."""

    @property
    def per_request(self) -> float:
        return self.cpu / max(self.answered, 1) * 1e6


async def measure(
    trees: list[str], route: str, *, stream: bool, rounds: int, seconds: float, level: int
) -> list[Turns]:
    turns = [Turns(tree) for tree in trees]
    with tempfile.TemporaryDirectory(prefix="dynagent-side-") as temporary:
        folder = Path(temporary)
        agents = folder / "agents"
        agents.mkdir()
        async with Child("bench._model_server") as model:
            (agents / f"{AGENT}.yaml").write_text(
                yaml.safe_dump(agent_document(model.ready["base_url"]))
            )
            services = [
                Service(
                    write_config(folder, agents),
                    free_port(),
                    folder / f"log-{index}",
                    {} if tree == "-" else {"PYTHONPATH": tree},
                )
                for index, tree in enumerate(trees)
            ]
            try:
                for service in services:
                    await service.start()
                path, body = _body(route, stream)
                for service in services:  # warm
                    await load(service.url + path, body, concurrency=level, seconds=1.0)
                for round_ in range(rounds):
                    order = list(zip(turns, services, strict=True))
                    for turn, service in order[:: -1 if round_ % 2 else 1]:
                        before = cpu_seconds(service.pid)
                        result = await load(
                            service.url + path, body, concurrency=level, seconds=seconds
                        )
                        used = cpu_seconds(service.pid) - before
                        turn.cpu += used
                        turn.answered += result.ok
                        turn.each.append(used / max(result.ok, 1) * 1e6)
            finally:
                for service in services:
                    await service.stop()
    return turns


def table(turns: list[Turns]) -> str:
    first = turns[0].per_request
    lines = [f"{'tree':40} {'µs/request':>10} {'÷ first':>8} {'median':>8} {'q1-q3':>11}"]
    for turn in turns:
        q1, _, q3 = statistics.quantiles(turn.each, n=4) if len(turn.each) > 1 else [0.0] * 3
        lines.append(
            f"{turn.tree:40} {turn.per_request:10.1f} {turn.per_request / first:8.3f} "
            f"{statistics.median(turn.each):8.1f} {q1:5.0f}-{q3:<5.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="PYTHONPATH of each tree; '-': the installed")
    parser.add_argument("--route", choices=sorted(BODIES), default="invoke")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--seconds", type=float, default=1.5, help="seconds per turn")
    parser.add_argument("--level", type=int, default=8, help="concurrency")
    args = parser.parse_args(argv)
    turns = asyncio.run(
        measure(
            args.trees,
            args.route,
            stream=args.stream,
            rounds=args.rounds,
            seconds=args.seconds,
            level=args.level,
        )
    )
    print(table(turns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
