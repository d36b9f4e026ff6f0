"""Request bodies, validated at the edge (pydantic), the answers the handlers write, and
their JSON Schemas for OpenAPI."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from dynagent.sessions.scope import MAX_SESSION_ID


class CallerBody(BaseModel):
    """A request body as a caller sends it (``read_body`` reads only these).

    The JSON parser keeps a process-wide cache of the short strings it has seen, to reuse
    them; a caller's values (session ids, inputs, tokens in them) would sit there long
    after the request, and the cache would fill with strings every caller makes up anew.
    Only keys, a small set every body repeats, are cached.

    A number is finite: ``NaN`` and ``Infinity`` (which JSON has not, but parsers take)
    are refused as such, not by whichever bound they happen to fail."""

    model_config = ConfigDict(cache_strings="keys", allow_inf_nan=False)


class ChatMessage(BaseModel):
    """A message in the OpenAI chat format."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=128)
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = Field(default=None, max_length=256)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class InvokeRequest(CallerBody):
    model_config = ConfigDict(extra="forbid")

    input: Annotated[str, Field(min_length=1)] | Annotated[list[ChatMessage], Field(min_length=1)]
    """The user's text, or a list of chat messages."""
    session_id: str | None = Field(default=None, min_length=1, max_length=MAX_SESSION_ID)
    """Continue this conversation (created on first use)."""
    variables: dict[str, str] = Field(default_factory=dict, max_length=100)
    """Values for the prompt's ``{{placeholders}}``."""
    stream: bool = False
    """Answer with ``text/event-stream`` of the run's events."""


class RollbackRequest(CallerBody):
    model_config = ConfigDict(extra="forbid")

    to: str | None = Field(default=None, min_length=1, max_length=64)
    """Revision to restore; default: the stable revision before the current one."""


SOME_TEXT = r"[^\s\x1c-\x1f]"
"""A character that is whitespace to neither regex engine: pydantic's (Rust: Unicode
White_Space, which its stripping removes too) nor Python's, which also counts U+001C to
U+001F. The document's pattern and the validation then agree on which texts are empty."""


class PauseRequest(CallerBody):
    model_config = ConfigDict(extra="forbid")

    reason: (
        Annotated[
            str,
            StringConstraints(
                strip_whitespace=True, min_length=1, max_length=4000, pattern=SOME_TEXT
            ),
        ]
        | None
    ) = None
    """Why the rollout is paused, recorded in ``rollout.paused.reason`` and shown in the
    status; default: ``paused by hand``."""


class PromoteRequest(CallerBody):
    model_config = ConfigDict(extra="forbid")

    force: bool = False
    """Promote a gated canary without a passing evaluation record for its revision; the
    canary's ``rollout.gate_record`` then says who forced it (state ``forced``)."""


class Answer(BaseModel):
    """An answer's shape: the keys it has at least. A body the core builds (an agent's
    status, a trace …) is validated into its model at the HTTP edge and written whole:
    keys beyond the model's (a source's details, a canary's guard) pass through."""

    model_config = ConfigDict(extra="allow")


class InvokeResponse(Answer):
    output: Any
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    trace_id: str
    session_id: str | None
    usage: dict[str, int | float]
    """``input_tokens``, ``output_tokens``, ``total_tokens`` and, when every model the run
    used has a price (``models.prices``), ``cost_usd``."""
    steps: int


class ErrorResponse(BaseModel):
    error: dict[str, str]


class SourceBody(Answer):
    kind: Literal["file", "nacos", "code"]
    location: str


class LastErrorBody(Answer):
    source: str
    path: str
    message: str
    at: float


class RevisionBody(Answer):
    revision: str
    variant: Literal["stable", "canary"]
    loaded_at: float
    factory: str
    source: SourceBody


class TrafficBody(Answer):
    requests: int
    """Runs compared with the other variant's (routed, pinned and shadow ones)."""
    errors: int
    unmatched: int = 0
    """Stable runs of callers ``rollout.match`` keeps from the canary: counted, not
    compared (the canary never serves such callers)."""
    recent_error_rate: float
    p50_ms: float | None
    p95_ms: float | None


class JudgedBody(Answer):
    count: int
    """Runs scored."""
    mean: float | None
    """The mean of the recent scores (``guard.window``)."""
    errors: int
    """Sampled runs the judge gave no score."""
    skipped: int
    """Sampled runs left out: the judge's queue was full."""


class OnlineScoresBody(Answer):
    """``rollout.judge``: the online scores of each variant."""

    agent: str
    sample: float
    stable: JudgedBody
    canary: JudgedBody


class GateBody(Answer):
    """A gated canary's gate (``rollout.gate``): it takes live traffic only while
    ``state`` is ``passed`` or ``forced``."""

    state: Literal["pending", "running", "passed", "failed", "forced", "stale"]
    revision: str
    suite_revision: str | None
    judge: str | None
    run_id: str | None
    reason: str | None
    at: float
    by: str | None


class CanaryBody(Answer):
    revision: str
    weight: float
    state: Literal["serving", "pulled"]
    source: SourceBody
    loaded_at: float
    judge: OnlineScoresBody | None = None
    """Present when the canary has ``rollout.judge``."""
    gate: GateBody | None = None
    """Present when the canary has ``rollout.gate``."""


class SuiteStatusBody(Answer):
    """The agent's evaluation suite (``{name}.evals.yaml``): the last good one, and why
    its newest version was refused, if it was."""

    state: Literal["valid", "refused"]
    revision: str | None
    cases: int
    needs_judge: int
    source: str | None
    loaded_at: float | None
    last_error: LastErrorBody | None


class AgentStatus(Answer):
    name: str
    state: Literal["serving", "refused"]
    revision: str | None
    description: str
    source: SourceBody | None
    factory: str | None
    loaded_at: float | None
    last_error: LastErrorBody | None
    canary: CanaryBody | None
    traffic: dict[str, TrafficBody]
    revisions: list[RevisionBody]
    evals: SuiteStatusBody | None = None
    """Present when the agent has an evaluation suite beside it."""


class SkippedRun(Answer):
    trace_id: str
    reason: str


class CapturedSuite(Answer):
    """Recent answered runs of an agent as an evaluation suite (a backtest)."""

    agent: str
    variant: Literal["stable", "canary"]
    cases: int
    skipped: list[SkippedRun]
    """Runs that could not become cases, and why."""
    suite: dict[str, Any]
    """The suite document (``{name}.evals.yaml``), validated."""


class AgentList(Answer):
    agents: list[AgentStatus]


class CurrentRevisions(Answer):
    stable: str | None
    canary: str | None


class RevisionHistory(Answer):
    name: str
    current: CurrentRevisions
    revisions: list[RevisionBody]


class Trace(Answer):
    trace_id: str
    agent: str
    revision: str
    variant: Literal["stable", "canary"]
    owner: str
    """Who made the run: ``key:<name>`` (a keys-file key), ``digest:<12 hex>`` (a key from
    the environment) or ``anonymous`` (auth off)."""
    factory: str
    source: SourceBody
    events: list[dict[str, Any]]
    nested: list[dict[str, Any]] = []
    """Runs of agents this run called as tools (agent, revision, variant, caller, depth,
    events), of the agents the reader may call; absent when it called none."""


class McpServerBody(Answer):
    server: str
    """The URL without query or credentials, ``stdio:NAME`` or ``nacos:NAME@VERSION``."""
    transport: Literal["streamable_http", "sse", "stdio", "nacos"]
    state: Literal["connecting", "connected", "down", "closed", "resolved"]
    tools: list[str]
    last_error: str | None
    agents: list[str]


class McpServerList(Answer):
    servers: list[McpServerBody]


class Health(Answer):
    status: Literal["ok"]


class Readiness(Answer):
    status: Literal["ready", "degraded", "loading", "stopping"]
    """``degraded``: serving, with something it depends on out (see ``degraded``);
    ``stopping``: told to stop, still serving for ``listen.lame_duck_seconds``."""
    agents: int
    degraded: dict[str, str]
    """What is out, and why: a config source serving its snapshot, the session store."""


class RolloutEntry(Answer):
    """One decision: ``{at, by, action, from?, to?, reason?}``."""

    at: str
    by: str
    action: str


class RolloutTrail(Answer):
    revision: str
    entries: list[RolloutEntry]


class EndedRollout(RolloutTrail):
    outcome: Literal["promoted", "ended"]
    at: float


class RolloutHistory(Answer):
    """``GET /v1/agents/{name}/rollout/history``."""

    name: str
    canary: RolloutTrail | None
    """The serving canary's decisions, as its document records them."""
    ended: EndedRollout | None
    """The last canary that ended here, promoted or removed, and its decisions."""


class SessionHistory(Answer):
    agent: str
    session_id: str
    messages: list[dict[str, Any]]
    """The conversation as the agent reads it next turn (within the history budget), oldest
    first, masked as traces are."""


class SessionDeleted(Answer):
    agent: str
    session_id: str
    deleted: Literal[True]


class TraceDeleted(Answer):
    trace_id: str
    deleted: Literal[True]
