"""One hostile 1 MB text through one pattern of the service, in a process of its own.

``python -m tests.security._hostile_text CASE`` prints ``{"case", "seconds"}``. The test
runs it under a timeout, so a pattern that backtracks (quadratic, cubic, exponential)
fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import resource
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from dynagent import AgentBuilder, ToolRegistry, load_spec
from dynagent.exceptions import OutputValidationError
from dynagent.interceptors import InterceptorRegistry
from dynagent.interceptors.pii import redact
from tests.support import AgentFactory, Reply, ScriptedModelServer

MB = 1_000_000


async def _answer(text: str, schema: dict[str, object]) -> None:
    """The real loop, the real ``openai`` client: ``text`` is the model's final answer."""
    async with ScriptedModelServer() as server:
        factory = AgentFactory(server)
        server.script("gpt-main", [Reply(text, pieces=[text])])
        agent = factory(output={"schema": schema, "retries": 0})
        try:
            await agent.run("go")
        except OutputValidationError:
            pass  # an invalid answer is the expected outcome; the time is what counts
        finally:
            await factory.aclose()


def _redaction(text: str) -> Callable[[], Coroutine[Any, Any, None]]:
    async def run() -> None:
        redact(text)

    return run


CASES: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
    # A long word without "@": the old e-mail pattern retried it from every position.
    "email": _redaction("a" * MB),
    "email-many": _redaction("a@b.co " * (MB // 7)),
    "id": _redaction("1(" * (MB // 2)),
    "phone": _redaction("1 " * (MB // 2) + "x"),
    # A fence, a million spaces and no closing fence: the old fence pattern was cubic.
    "fence": lambda: _answer("```" + " " * MB + "x", {"type": "string"}),
    # A nested quantifier in an output schema: exponential under Python's re.
    "schema-pattern": lambda: _answer(
        json.dumps("a" * MB + "!"), {"type": "string", "pattern": "^(a+)+$"}
    ),
}


NESTED_ARRAYS = {
    "name": "nested",
    "model": {"provider": "test"},
    "prompt": {"system": "x"},
    "output": {
        "schema": {
            "type": "array",
            "minItems": 1000,
            "items": {
                "type": "array",
                "minItems": 1000,
                "items": {"type": "array", "minItems": 1000, "items": {"type": "integer"}},
            },
        },
        "retries": 0,
    },
}
"""Under 250 bytes as JSON: three nested arrays, each asking for 1,000 items."""


async def _offline_answer() -> None:
    """The offline ``test`` model answering an agent with ``NESTED_ARRAYS``' schema."""
    builder = AgentBuilder(tools=ToolRegistry.default(), interceptors=InterceptorRegistry.default())
    agent = builder.build(load_spec(NESTED_ARRAYS))
    with contextlib.suppress(OutputValidationError):  # the capped answer fails its schema
        await agent.run("go")


MEMORY_CASES: dict[str, Callable[[], Coroutine[Any, Any, None]]] = {
    "offline-nested-arrays": _offline_answer,
}


def _peak_rss_kb() -> int:
    """This process's own high-water RSS (``VmHWM``). Not ``ru_maxrss``: Linux carries that
    across ``exec``, so a child of a large pytest process would report the parent's size."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    case = sys.argv[1]
    started = time.perf_counter()
    asyncio.run({**CASES, **MEMORY_CASES}[case]())
    peak_mb = _peak_rss_kb() / 1024
    seconds = round(time.perf_counter() - started, 3)
    print(json.dumps({"case": case, "seconds": seconds, "peak_rss_mb": round(peak_mb)}))


if __name__ == "__main__":
    main()
