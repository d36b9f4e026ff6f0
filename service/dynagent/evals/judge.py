"""Judges are agents: an ``llm-rubric`` check is scored by an agent of the same service
whose answer is ``{"score": 0..1, "reason": "..."}`` (its output schema says so), so a
judge is versioned, hot-reloaded and canaried like every agent.

A judge's calls are bounded (``concurrency`` in flight, ``timeout`` each) and counted
apart from the candidate's. An answer that is not a score — malformed JSON, a score out
of range, a failed or timed-out run — is a per-check error, never a passed check.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from dynagent.evals.engine import Verdict
from dynagent.exceptions import DynagentError
from dynagent.runtime.agent import Agent

SHOWN = 4000
"""Characters of an answer or rubric put in front of the judge (each)."""

_RUBRIC = """You grade the answer of an AI agent against a rubric.

Rubric:
{rubric}

The user's message:
{input}

The agent's answer:
{answer}

Reply with JSON only: {{"score": <a number from 0 to 1>, "reason": "<one sentence>"}}."""

_PAIRWISE = """You compare two answers of an AI agent to the same message.

{rubric}The user's message:
{input}

Reference answer (the version in service now):
{reference}

Candidate answer (the new version):
{answer}

Is the candidate at least as good as the reference? Reply with JSON only:
{{"score": <1 if at least as good, else a number from 0 to 1 for how close it comes>,
"reason": "<one sentence>"}}."""


class Judge:
    """Scores answers with ``agent``: ``rubric`` (an ``llm-rubric`` check) and
    ``pairwise`` (the candidate at least as good as a reference answer)."""

    def __init__(
        self,
        agent: Agent,
        *,
        concurrency: int = 4,
        timeout: float = 60.0,
    ) -> None:
        self.agent = agent
        self.timeout = timeout
        self._limit = asyncio.Semaphore(max(1, concurrency))
        self.tokens = 0
        self.cost: float | None = 0.0
        """The judge's own spend; None once one of its calls had no known price."""
        self.calls = 0

    @property
    def label(self) -> str:
        return f"{self.agent.name}@{self.agent.revision}"

    async def rubric(self, rubric: str, input: str, answer: str) -> Verdict:
        prompt = _RUBRIC.format(rubric=_cut(rubric), input=_cut(input), answer=_cut(answer))
        return await self._score(prompt)

    async def pairwise(
        self, input: str, answer: str, reference: str, rubric: str | None = None
    ) -> Verdict:
        lead = f"Rubric:\n{_cut(rubric)}\n\n" if rubric else ""
        prompt = _PAIRWISE.format(
            rubric=lead, input=_cut(input), reference=_cut(reference), answer=_cut(answer)
        )
        return await self._score(prompt)

    async def _score(self, prompt: str) -> Verdict:
        async with self._limit:
            self.calls += 1
            try:
                result = await asyncio.wait_for(self.agent.run(prompt), self.timeout)
            except TimeoutError:
                return _error(f"the judge {self.label} did not answer in {self.timeout:g} s")
            except DynagentError as exc:
                return _error(f"the judge {self.label} failed: {exc}")
        usage = result.usage
        self.tokens += usage.input_tokens + usage.output_tokens
        price = result.cost_usd  # the judge's model priced by the service's models.prices
        self.cost = None if self.cost is None or price is None else self.cost + price
        return parse_score(result.output, self.label)


def parse_score(output: Any, label: str = "the judge") -> Verdict:
    """A judge's answer as a verdict: ``{"score": 0..1, "reason": str}`` (as parsed
    structured output, or as JSON text); anything else is an error verdict."""
    if isinstance(output, str):
        try:
            output = json.loads(output[:100_000])
        except ValueError:
            return _error(f"{label} answered malformed JSON: {output[:200]!r}")
    if not isinstance(output, dict):
        return _error(f"{label} answered {type(output).__name__}, not an object with a score")
    score = output.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return _error(f"{label} answered no score between 0 and 1: {str(output)[:200]!r}")
    reason = output.get("reason")
    text = reason[:500] if isinstance(reason, str) else ""
    return Verdict(True, float(score), f"judged {float(score):.2f}: {text}")


def _error(reason: str) -> Verdict:
    return Verdict(False, 0.0, f"judge error: {reason}", error=True)


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + " …[cut]"
