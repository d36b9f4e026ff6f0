"""The evaluation suite of an agent: ``{name}.evals.yaml`` beside the agent's definition.

A suite lists cases (an input, earlier turns, recorded tool results) and the checks
their answers must pass, with promptfoo's ``assert`` names where promptfoo has one, plus
what only an agent service can check: the tools called, steps, latency, tokens and cost.
It is validated like an agent definition: unknown fields are errors naming their path.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic import model_validator as _model_validator

from dynagent.evals._json_path import parse_path
from dynagent.exceptions import ConfigError, FieldIssue
from dynagent.spec._issues import document_path, unknown_field
from dynagent.spec._schemas import check_patterns, check_schema
from dynagent.spec.agent import Format, parse_document, spec_revision

JUDGED_TYPES = ("llm-rubric", "pairwise")
"""Checks a judge agent scores."""

SUITE_SUFFIXES = (".evals.yaml", ".evals.yml", ".evals.json")

MAX_CASES = 5000
MAX_TRIALS = 100
MAX_TEXT = 100_000
"""Characters in one input, turn, expected value or recorded tool result."""


def is_suite_key(key: str) -> bool:
    """``{name}.evals.yaml`` (a file name or a dataId): the suite of agent ``name``."""
    return key.rsplit("/", 1)[-1].lower().endswith(SUITE_SUFFIXES)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _Check(_Strict):
    weight: float = Field(default=1.0, ge=0, le=1000)
    """Share of this check in the case's score; a check of weight 0 is reported only."""
    metric: str | None = Field(default=None, max_length=128)
    """A name to report this check's score under."""


class TextCheck(_Check):
    """The answer equals, or (case-insensitively) contains or lacks, a text."""

    type: Literal["contains", "icontains", "not-contains", "not-icontains"]
    value: str = Field(max_length=MAX_TEXT)


class EqualsCheck(_Check):
    """The answer is exactly ``value``; a mapping or list is compared as parsed JSON."""

    type: Literal["equals"]
    value: Annotated[Any, Field()]


class RegexCheck(_Check):
    """The answer matches ``value`` somewhere (RE2: linear time, no lookaround)."""

    type: Literal["regex"]
    value: str

    @field_validator("value")
    @classmethod
    def _re2(cls, value: str) -> str:
        check_patterns({"pattern": value})
        return value


class JsonCheck(_Check):
    """``is-json``: the whole answer is JSON; ``contains-json``: some JSON value in it is.
    With a JSON Schema as ``value``, that JSON must also match it."""

    type: Literal["is-json", "contains-json"]
    value: dict[str, Any] | None = None

    @field_validator("value")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            check_schema(value)
        return value


class JsonPathCheck(_Check):
    """A value inside the JSON answer: present, or equal to ``equals`` when given."""

    type: Literal["json-path"]
    path: str = Field(max_length=1000)
    """``$.order.items[0].sku`` (names, ``['quoted']`` names and indexes only)."""
    equals: Any = None

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        parse_path(value)
        return value


class RubricCheck(_Check):
    """Scored by the suite's judge agent against a rubric (``judge`` must be set)."""

    type: Literal["llm-rubric"]
    value: str = Field(min_length=1, max_length=MAX_TEXT)
    threshold: float = Field(default=0.5, ge=0, le=1)
    """The judge's score (0..1) at which the check passes."""


class PairwiseCheck(_Check):
    """Scored by the suite's judge agent: is the answer at least as good as the reference
    answer (the case's ``reference``, else the stable version's answer in the same run)?"""

    type: Literal["pairwise"]
    value: str | None = Field(default=None, min_length=1, max_length=MAX_TEXT)
    """A rubric the comparison follows (optional)."""
    threshold: float = Field(default=0.5, ge=0, le=1)
    """The judge's score (0..1) at which the check passes."""


class ToolCheck(_Check):
    """``tool-called``: the run called tool ``value`` (with ``args`` among its arguments,
    when given); ``tool-not-called``: it never did."""

    type: Literal["tool-called", "tool-not-called"]
    value: str = Field(min_length=1, max_length=128)
    args: dict[str, Any] | None = None


class CeilingCheck(_Check):
    """The run stayed within a ceiling: steps, wall time in ms, tokens or cost."""

    type: Literal["max-steps", "max-latency-ms", "max-tokens", "max-cost"]
    value: float = Field(ge=0)


Assertion = Annotated[
    TextCheck
    | EqualsCheck
    | RegexCheck
    | JsonCheck
    | JsonPathCheck
    | RubricCheck
    | PairwiseCheck
    | ToolCheck
    | CeilingCheck,
    Field(discriminator="type"),
]

ASSERT_TYPES = (
    "equals",
    "contains",
    "icontains",
    "not-contains",
    "not-icontains",
    "regex",
    "is-json",
    "contains-json",
    "json-path",
    "llm-rubric",
    "pairwise",
    "tool-called",
    "tool-not-called",
    "max-steps",
    "max-latency-ms",
    "max-tokens",
    "max-cost",
)


class Turn(_Strict):
    """An earlier turn of the conversation the case continues."""

    role: Literal["user", "assistant", "system"]
    content: str = Field(max_length=MAX_TEXT)


class Case(_Strict):
    """One input and the checks its answer must pass."""

    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    input: str = Field(min_length=1, max_length=MAX_TEXT)
    variables: dict[str, str] = {}
    history: list[Turn] = Field(default=[], max_length=200)
    trials: int = Field(default=1, ge=1, le=MAX_TRIALS)
    """How many times the case runs."""
    pass_trials: float = Field(default=1.0, ge=0, le=1)
    """The share of trials that must pass for the case to pass."""
    tags: tuple[str, ...] = Field(default=(), max_length=50)
    tool_results: dict[str, str | tuple[str, ...]] = {}
    """Tool name → the result it returns in this case (a list: one per call, in order)."""
    live_tools: bool = True
    """False: a tool without a recorded result answers the placeholder even where it is
    ``shadow_safe`` (cases captured from production set it: a replay runs no real tool)."""
    reference: str | None = Field(default=None, max_length=MAX_TEXT)
    """The reference answer ``pairwise`` checks compare with (captured backtests record
    the stable version's answer here)."""
    assert_: list[Assertion] = Field(alias="assert", min_length=1, max_length=100)

    @cached_property
    def judged(self) -> bool:
        """Whether a judge scores any of its checks (looked up once per case, not per run)."""
        return any(check.type in JUDGED_TYPES for check in self.assert_)

    @field_validator("tool_results")
    @classmethod
    def _results(cls, value: dict[str, str | tuple[str, ...]]) -> dict[str, Any]:
        for name, results in value.items():
            listed = (results,) if isinstance(results, str) else results
            if not listed:
                raise ValueError(f"tool {name!r}: give at least one recorded result")
            if any(len(text) > MAX_TEXT for text in listed):
                raise ValueError(f"tool {name!r}: a result longer than {MAX_TEXT} characters")
        return value


class PassRule(_Strict):
    """When a run of the suite passes."""

    min_pass_rate: float = Field(default=1.0, ge=0, le=1)
    min_mean_score: float | None = Field(default=None, ge=0, le=1)
    no_regressions: bool = False
    """No case that passes on the baseline (the stable version) may fail."""


class Judge(_Strict):
    """The agent that scores ``llm-rubric`` and ``pairwise`` checks (an agent with an
    output schema)."""

    agent: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9][a-z0-9-]*$")
    concurrency: int = Field(default=4, ge=1, le=64)
    timeout: float = Field(default=60.0, gt=0, le=600)


class EvalSuite(_Strict):
    """The cases of an agent, the rule a run must pass, and its judge."""

    cases: list[Case] = Field(min_length=1, max_length=MAX_CASES)
    pass_: PassRule = Field(default=PassRule(), alias="pass")
    judge: Judge | None = None

    @_model_validator(mode="after")
    def _coherent(self) -> EvalSuite:
        seen: set[str] = set()
        for case in self.cases:
            if case.id in seen:
                raise ValueError(f"two cases have the id {case.id!r}; case ids must be unique")
            seen.add(case.id)
        if self.judge is None and self.needs_judge:
            raise ValueError(
                "llm-rubric and pairwise checks are scored by a judge: add judge: {agent: NAME}"
            )
        return self

    @property
    def needs_judge(self) -> int:
        """How many checks a judge scores."""
        return sum(1 for c in self.cases for a in c.assert_ if a.type in JUDGED_TYPES)

    @cached_property
    def revision(self) -> str:
        """Content hash of the suite: equal suites share a revision (a suite is frozen:
        hashed once, not on every run of it, where it cost a few µs a case)."""
        return spec_revision(self.model_dump(mode="json", by_alias=True))


def load_suite(
    document: str | Mapping[str, Any], *, fmt: Format = "yaml", source: str = "", agent: str = ""
) -> EvalSuite:
    """Parse and validate the suite of ``agent``; raises ``ConfigError``."""
    try:
        data = parse_document(document, fmt) if isinstance(document, str) else document
    except ConfigError as exc:
        raise ConfigError(f"evaluation suite {exc.reason}", source=source, agent=agent) from None
    if not isinstance(data, Mapping):
        raise ConfigError(
            "an evaluation suite must be a mapping of fields", source=source, agent=agent
        )
    try:
        return EvalSuite.model_validate(dict(data))
    except ValidationError as exc:
        raise ConfigError(
            "invalid evaluation suite", source=source, agent=agent, issues=_issues(exc, data)
        ) from None


def _issues(error: ValidationError, data: Any) -> list[FieldIssue]:
    """As for agent documents (``cases[#3].assert[#1]: unknown field 'valu' …``), without
    the ``type`` tag pydantic puts in the location of a check."""
    found = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        loc = tuple(
            part
            for at, part in enumerate(loc)
            if not (at >= 2 and loc[at - 2] == "assert" and part in ASSERT_TYPES)
        )
        path = document_path(loc, data)
        message = item["msg"]
        if item["type"] == "extra_forbidden" and loc:
            message = unknown_field(str(loc[-1]), loc[:-1], EvalSuite, path.rsplit(".", 1)[0])
        found.append(FieldIssue(path, message))
    return found


def suite_agent(key: str) -> str:
    """``support-bot.evals.yaml`` → ``support-bot``: the agent a suite document belongs to."""
    return key.rsplit("/", 1)[-1].split(".", 1)[0]
