"""A flooding model: the CPU one 1 MB answer streamed as one-word chunks costs its reader.

The hostile-input run's worst request (``tests/security/test_hostile_inputs.py``) is a
1 MB echo streamed back as 151,518 chunks, one write each. Its model runs in a process
of its own; this process reads the same answer, in interleaved rounds, three ways, and
reports the CPU each took (``time.process_time``, this process only) with the ratios
between them:

- ``openai SDK``: ``client.chat.completions.create(stream=True)``, iterated chunk by
  chunk, as an application on the SDK reads it (typed chunks, one line at a time);
- ``aiohttp, no work``: the same body read with ``readany()`` and thrown away, on a
  plain ``aiohttp`` session: what the transport alone costs when every TCP segment
  wakes the reader;
- ``dynagent``: ``OpenAIModel.stream``, everything the service does with the answer
  up to the text deltas (paced reads, SSE parsing, decoding, accumulating).

    .venv/bin/python -m bench.model_stream            # 3 rounds
    .venv/bin/python -m bench.model_stream --quick    # 1 round
    .venv/bin/python -m bench.model_stream --no-sdk   # without the SDK (~18 s a round)
    .venv/bin/python -m bench.model_stream --typical  # ordinary answers, not a flood
    .venv/bin/python -m bench.model_stream --floor    # only aiohttp: the floor of the
                                                      # hostile-input test's CPU ratio

``--typical`` reads ordinary answers instead: 64 answers of 300 words of prose, 32 streams
at a time, each written a word every ``--gap`` seconds (default 0.01: 100 tokens/s, a
fast hosted model), so that most reads find one chunk, as in a service under load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

import aiohttp
import openai

from dynagent.models import ClientPool, OpenAIModel
from dynagent.models.base import ModelRequest, TextDelta
from tests.support import DEFAULT_MODEL

PIECE, TIMES = "a@b.co 555 123 4567 123-45-6789 ", 30_303
TEXT = PIECE * TIMES
"""The hostile run's "full of PII" input: 1 MB, 151,515 words."""
TYPICAL_PIECE = (
    "The short answer is yes, but it depends on how the cache is shared between workers. "
    "If each worker keeps its own copy, a change made by one is not seen by the others "
    "until their entries expire, so readers may get stale values for up to a minute. "
    "A shared store such as Redis avoids that, at the cost of one network round trip "
    "per read; batching the reads of one request keeps that cost small in practice. "
)
TYPICAL_TEXT = TYPICAL_PIECE * 4
"""An ordinary answer: 300 words of prose (1.6 kB)."""
TYPICAL_ANSWERS, TYPICAL_AT_ONCE = 64, 32
_MODEL_PROCESS = """
import asyncio, sys
from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer

async def main() -> None:
    server = await ScriptedModelServer().start()
    text, gap = sys.argv[1] * int(sys.argv[2]), float(sys.argv[3])
    server.script(DEFAULT_MODEL, [Reply(text, gap=gap)], cycle=True)
    print(server.base_url, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""
KEY = "bench-key"
MESSAGES: list[Any] = [{"role": "user", "content": "echo"}]


@dataclass(frozen=True, slots=True)
class Answers:
    """What the model process streams, and how many of its answers a round reads."""

    piece: str
    times: int
    gap: float = 0.0
    """Seconds between two chunks of an answer."""
    count: int = 1
    at_once: int = 1
    """Answers read at the same time."""

    @property
    def text(self) -> str:
        return self.piece * self.times


FLOOD = Answers(PIECE, TIMES)
TYPICAL = Answers(TYPICAL_PIECE, 4, 0.01, TYPICAL_ANSWERS, TYPICAL_AT_ONCE)


async def _each(answers: Answers, read: Callable[[], Awaitable[int]]) -> int:
    """The characters of ``answers.count`` reads, ``answers.at_once`` at a time."""
    size = 0
    for first in range(0, answers.count, answers.at_once):
        batch = min(answers.at_once, answers.count - first)
        size += sum(await asyncio.gather(*(read() for _ in range(batch))))
    return size


async def _openai_sdk(base_url: str, answers: Answers) -> int:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=KEY, max_retries=0) as client:

        async def read() -> int:
            stream = await client.chat.completions.create(
                model=DEFAULT_MODEL, messages=MESSAGES, stream=True
            )
            size = 0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    size += len(chunk.choices[0].delta.content)
            return size

        return await _each(answers, read)


async def _aiohttp_no_work(base_url: str, answers: Answers) -> int:
    body = {"model": DEFAULT_MODEL, "messages": MESSAGES, "stream": True}
    headers = {"Authorization": f"Bearer {KEY}"}
    async with aiohttp.ClientSession() as session:

        async def read() -> int:
            url = f"{base_url}/chat/completions"
            async with session.post(url, json=body, headers=headers) as response:
                size = 0
                while block := await response.content.readany():
                    size += len(block)
                return size

        return await _each(answers, read)


async def _dynagent(base_url: str, answers: Answers) -> int:
    pool = ClientPool()
    try:
        # The whole answer, past the 150,000 chunks an agent takes by default.
        model = OpenAIModel(pool.get(base_url, KEY), DEFAULT_MODEL, retries=0, max_chunks=10**6)

        async def read() -> int:
            size = 0
            async for item in model.stream(ModelRequest(messages=tuple(MESSAGES))):
                if isinstance(item, TextDelta):
                    size += len(item.text)
            return size

        return await _each(answers, read)
    finally:
        await pool.aclose()


READERS: dict[str, Callable[[str, Answers], Awaitable[int]]] = {
    "openai SDK": _openai_sdk,
    "aiohttp, no work": _aiohttp_no_work,
    "dynagent": _dynagent,
}


FLOOR = "aiohttp, no work"
"""The reader that costs the least a machine can do with the stream: a floor in its units
(the hostile-input test measures its limits in it)."""


async def _rounds(
    base_url: str, rounds: int, names: Collection[str], answers: Answers
) -> dict[str, list[float]]:
    readers = {name: read for name, read in READERS.items() if name in names}
    seconds: dict[str, list[float]] = {name: [] for name in readers}
    expected = len(answers.text) * answers.count
    for _ in range(rounds):
        for name, read in readers.items():
            started = time.process_time()
            size = await read(base_url, answers)
            seconds[name].append(time.process_time() - started)
            if name == "dynagent" and size != expected:
                raise AssertionError(f"dynagent read {size} characters of {expected}")
    return seconds


def measure(
    rounds: int = 3,
    *,
    sdk: bool = True,
    answers: Answers = FLOOD,
    readers: Collection[str] = tuple(READERS),
) -> dict[str, Any]:
    """The ``readers``' CPU; ``sdk=False`` leaves out the openai SDK's (~18 s a round)."""
    names = [name for name in readers if sdk or name != "openai SDK"]
    process = subprocess.Popen(
        [sys.executable, "-c", _MODEL_PROCESS, answers.piece, str(answers.times), str(answers.gap)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        base_url = process.stdout.readline().strip()
        seconds = asyncio.run(_rounds(base_url, rounds, names, answers))
    finally:
        process.kill()
        process.wait(timeout=30)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    ours = median.get("dynagent")
    return {
        "answers": answers.count,
        "at_once": answers.at_once,
        "gap_s": answers.gap,
        "chunks": len(answers.text.split()) + 3,
        "rounds": rounds,
        "cpu_s": {name: round(value, 3) for name, value in median.items()},
        "cpu_s_each_round": {
            name: [round(v, 3) for v in values] for name, values in seconds.items()
        },
        "dynagent_x": {
            name: round(ours / value, 2)
            for name, value in median.items()
            if name != "dynagent" and ours is not None
        },
    }


def table(figures: dict[str, Any]) -> str:
    what = (
        f"1 MB answer in {figures['chunks']:,} chunks, one write each"
        if figures["answers"] == 1
        else f"{figures['answers']} answers of {figures['chunks']} chunks, "
        f"{figures['at_once']} at a time, a chunk every {figures['gap_s']:g} s"
    )
    lines = [
        f"{what}; CPU of the reader, median of {figures['rounds']} interleaved rounds",
        f"{'reader':24}{'CPU s':>10}{'dynagent / it':>16}",
    ]
    for name, cpu in figures["cpu_s"].items():
        ratio = figures["dynagent_x"].get(name)
        lines.append(f"{name:24}{cpu:>10.3f}{'' if ratio is None else f'{ratio:.2f}x':>16}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.model_stream")
    parser.add_argument("--quick", action="store_true", help="one round")
    parser.add_argument("--no-sdk", action="store_true", help="leave out the openai SDK")
    parser.add_argument(
        "--typical", action="store_true", help="ordinary answers at a model's pace, not a flood"
    )
    parser.add_argument(
        "--gap", type=float, default=TYPICAL.gap, help="seconds between chunks (--typical)"
    )
    parser.add_argument("--floor", action="store_true", help=f"only the {FLOOR!r} reader")
    args = parser.parse_args(argv)
    answers = replace(TYPICAL, gap=args.gap) if args.typical else FLOOD
    readers = [FLOOR] if args.floor else list(READERS)
    figures = measure(1 if args.quick else 3, sdk=not args.no_sdk, answers=answers, readers=readers)
    print(table(figures))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
