"""The work every runtime does in the overhead benchmark, and the scripts the model plays.

Scenario A: the model asks for one tool call, then answers.
Scenario B: two tool calls at once (run concurrently), then one more, then the answer.
``reply`` is one model call that answers at once: the unit of the service benchmarks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tests.support.scripted_model import CallTools, Reply, Step

SYSTEM = "You are a benchmark agent."
REPLY_MODEL = "reply"
REPLY_TEXT = "pong"
SOAK_TOOL_MODEL = "soak-tool"
"""The soak's tool agent: the built-in ``calculator``, then the answer."""


async def lookup(key: str) -> str:
    """Look a key up."""
    return key.upper()


async def combine(left: str, right: str) -> str:
    """Join two values."""
    return left + right


FUNCTIONS: dict[str, Callable[..., Awaitable[str]]] = {"lookup": lookup, "combine": combine}


@dataclass(frozen=True, slots=True)
class Scenario:
    key: str
    """``a`` or ``b``; also the scripted model's name, ``scenario-{key}``."""
    title: str
    question: str
    answer: str
    script: tuple[Step, ...]

    @property
    def model(self) -> str:
        return f"scenario-{self.key}"

    @property
    def model_calls(self) -> int:
        return len(self.script)


SCENARIO_A = Scenario(
    "a",
    "A: 1 tool call, then the answer (2 model calls)",
    "Look up a.",
    "The answer is A.",
    (CallTools([("lookup", {"key": "a"})]), Reply("The answer is A.")),
)
SCENARIO_B = Scenario(
    "b",
    "B: 2 parallel tool calls, 1 tool call, then the answer (3 model calls)",
    "Look up a and b, then combine them.",
    "The answer is AB.",
    (
        CallTools([("lookup", {"key": "a"}), ("lookup", {"key": "b"})]),
        CallTools([("combine", {"left": "A", "right": "B"})]),
        Reply("The answer is AB."),
    ),
)
SCENARIOS = (SCENARIO_A, SCENARIO_B)

SCRIPTS: dict[str, tuple[Step, ...]] = {
    **{scenario.model: scenario.script for scenario in SCENARIOS},
    REPLY_MODEL: (Reply(REPLY_TEXT),),
    SOAK_TOOL_MODEL: (CallTools([("calculator", {"expression": "6*7"})]), Reply("42")),
}
"""Every model the bench's scripted server plays, each replayed in a cycle."""
