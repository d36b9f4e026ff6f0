"""Every error Dynagent raises, in one shallow tree.

Each error carries the fields a caller needs to act on it and a message that
says how to fix the problem. The HTTP layer maps ``DynagentError.kind`` to a
status code in one place (``dynagent.http.errors``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dynagent.events import Event

ErrorKind = Literal[
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "too_large",
    "config_error",
    "output_invalid",
    "limit_exceeded",
    "cost_limit",
    "model_error",
    "input_too_long",
    "circuit_open",
    "timeout",
    "tool_error",
    "unavailable",
    "conflict",
]


class DynagentError(Exception):
    """Base of all Dynagent errors."""

    kind: ErrorKind = "bad_request"

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        """The request field at fault, where there is one (OpenAI's ``param``)."""


@dataclass(frozen=True, slots=True)
class FieldIssue:
    """One problem in a document, located by its field path (``model.timeout``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '<root>'}: {self.message}"


class ConfigError(DynagentError):
    """An agent definition could not be parsed, validated or built.

    The last good version of the agent keeps serving; this error is what its
    status shows as ``last_error``.
    """

    kind: ErrorKind = "config_error"

    def __init__(
        self,
        reason: str,
        *,
        source: str = "",
        agent: str = "",
        issues: Sequence[FieldIssue] = (),
    ) -> None:
        self.source = source
        self.agent = agent
        self.reason = reason
        self.issues = tuple(issues)
        where = " ".join(part for part in (f"agent {agent!r}" if agent else "", source) if part)
        details = "; ".join(str(issue) for issue in self.issues)
        text = f"{where}: {reason}" if where else reason
        super().__init__(f"{text} ({details})" if details else text)

    @property
    def path(self) -> str:
        """Field path of the first issue, or '' when the error is not about one field."""
        return self.issues[0].path if self.issues else ""


class NotFound(DynagentError):
    kind: ErrorKind = "not_found"


class AgentNotFound(NotFound):
    def __init__(self, name: str, removed: str = "") -> None:
        self.name = name
        self.removed = removed
        """Why and when the agent went away (``removed at T: deleted in …``), if it did."""
        if removed:
            message = f"agent {name!r} was {removed}; GET /v1/agents lists the agents served"
        else:
            message = f"no agent named {name!r}; GET /v1/agents lists the agents served"
        super().__init__(message)


class ResponseNotFound(NotFound):
    """No stored Responses API answer by that id for this API key."""


class Conflict(DynagentError):
    """The action does not fit the agent's current state (e.g. promote without a canary)."""

    kind: ErrorKind = "conflict"


class BadRequest(DynagentError):
    kind: ErrorKind = "bad_request"


class TooManyStreams(DynagentError):
    """A stream limit (``listen.max_watch_streams``, ``…_per_key``) is reached: 429."""

    kind: ErrorKind = "limit_exceeded"


class Unauthorized(DynagentError):
    kind: ErrorKind = "unauthorized"


class Forbidden(DynagentError):
    kind: ErrorKind = "forbidden"


_OWN_LIMITS = frozenset({"limit_exceeded", "cost_limit"})
"""A run's own limits (``limits.max_steps``, an interceptor's call limit, ``max_cost_usd``);
a stream limit of the service is not a run's, and passes as streams end."""


_REFUSED = frozenset({"model_error", "input_too_long"})
"""Model errors that are the endpoint's refusal of the request, when not retryable (an
open circuit, a timeout are neither)."""


class RunError(DynagentError):
    """A run ended without an answer; ``events`` holds the partial trace."""

    kind: ErrorKind = "model_error"

    def __init__(self, message: str, *, trace_id: str = "", events: Sequence[Event] = ()) -> None:
        super().__init__(message)
        self.trace_id = trace_id
        self.events: tuple[Event, ...] = tuple(events)
        self.revision = ""
        """The agent revision the run was on; set by the HTTP layer for its headers."""
        self.variant = ""

    @property
    def final(self) -> bool:
        """Whether the same request would fail the same way, so that a client's retry would
        only repeat the run and its model calls: a run past its own step, call or cost
        limit. (The model client has already retried what was transient.)"""
        return self.kind in _OWN_LIMITS


class RunFailed(RunError):
    """A streamed run failed before anything was sent; carries the run's error kind and
    whether a retry would fail alike, as its ``error`` event said (``retryable``)."""

    def __init__(
        self, kind: str, message: str, *, trace_id: str = "", retryable: bool = True
    ) -> None:
        super().__init__(message, trace_id=trace_id)
        self.kind = kind  # type: ignore[assignment]  # an ErrorKind, as the run reported it
        self.retryable = retryable

    @property
    def final(self) -> bool:
        return not self.retryable or super().final


class MaxStepsExceeded(RunError):
    kind: ErrorKind = "limit_exceeded"


class LimitExceeded(RunError):
    """A model or tool call limit set by an interceptor was reached."""

    kind: ErrorKind = "limit_exceeded"


class CostLimitExceeded(RunError):
    """A run spent ``limits.max_cost_usd``: ended before a model call that would go past
    it, or after the call that went past it."""

    kind: ErrorKind = "cost_limit"

    def __init__(self, message: str, *, spent: float, limit: float) -> None:
        super().__init__(message)
        self.spent = spent
        self.limit = limit


class RunTimeout(RunError):
    kind: ErrorKind = "timeout"


class ModelError(RunError):
    """The model endpoint failed after retries and fallback."""

    kind: ErrorKind = "model_error"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        trace_id: str = "",
        events: Sequence[Event] = (),
    ) -> None:
        super().__init__(message, trace_id=trace_id, events=events)
        self.status = status
        self.retryable = retryable

    @property
    def final(self) -> bool:
        """The endpoint refused the request itself (an HTTP 4xx but 408, 409 or 429, or an
        answer that is not one, or an input too long), which the model client judged not
        worth retrying."""
        return not self.retryable and self.kind in _REFUSED


class InputTooLong(ModelError):
    """The model endpoint refused the request as longer than its context window: the
    caller's input, with the agent's prompt, history and tools, must be shorter (400)."""

    kind: ErrorKind = "input_too_long"


class ModelTimeout(ModelError):
    """The model endpoint did not answer within ``model.timeout`` (a gateway timeout)."""

    kind: ErrorKind = "timeout"


class CircuitOpen(ModelError):
    """Calls to a model endpoint are failing fast after too many consecutive failures.

    Nothing was sent to the endpoint; ``retry_after`` says when a trial call
    will be let through again.
    """

    kind: ErrorKind = "circuit_open"

    def __init__(self, endpoint: str, retry_after: float, failures: int, last_error: str) -> None:
        self.endpoint = endpoint
        self.retry_after = retry_after
        self.failures = failures
        super().__init__(
            f"circuit open for {endpoint}, retry after {_seconds(retry_after)}s "
            f"({failures} consecutive failures; last: {last_error})"
        )


def _seconds(value: float) -> str:
    """``29.97`` → ``30``, ``0.04`` → ``0.1``: a retry hint never rounds down to zero."""
    return f"{max(math.ceil(value * 10), 1) / 10:g}"


class ServiceStopping(RunError):
    """The service is shutting down and the run did not finish within the drain time."""

    kind: ErrorKind = "unavailable"


class OutputValidationError(RunError):
    kind: ErrorKind = "output_invalid"


class ToolFailed(RunError):
    """A tool configured with ``on_error: fail`` raised."""

    kind: ErrorKind = "tool_error"


class SessionConflict(RunError):
    """A run lost its session's lock to another run (it outlived the lock's TTL)."""

    kind: ErrorKind = "conflict"


class SessionStoreUnavailable(RunError):
    """The shared session store (Redis) could not be reached: an outage, not a failure of
    the agent, so no version is judged by it. ``retry_after``: seconds until it is worth
    asking again (the store pings Redis that often while it is out)."""

    kind: ErrorKind = "unavailable"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ToolCallError(DynagentError):
    """A tool call failed. The model sees ``TOOL_ERROR: …`` (or the run ends, for a tool
    with ``on_error: fail``); the ``retry`` interceptor reads ``transient``."""

    kind: ErrorKind = "tool_error"

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status the tool's endpoint answered with, where there was one."""
        self.transient = transient
        """The same call may succeed if sent again: the endpoint could not be reached, the
        connection broke, the call timed out, or it answered 408, 429 or 5xx. False for an
        answer about the call itself (another 4xx, a tool's own error): resending it gets
        the same answer, or repeats what the tool did."""

    @classmethod
    def answered(cls, status: int, message: str) -> ToolCallError:
        """For an HTTP answer with ``status`` (>= 400): transient for 408 (request
        timeout), 429 (too many requests) and 5xx; any other 4xx is about the request
        itself, and sending it again gets the same answer."""
        return cls(message, status=status, transient=status >= 500 or status in (408, 429))


class ToolTimeout(ToolCallError):
    """A tool did not finish within its ``timeout``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, transient=True)


class StartupError(DynagentError):
    """The service cannot start: its port is taken, or its session database cannot be
    opened. ``dynagent serve`` reports it in one line and exits 2; never an HTTP answer."""

    kind: ErrorKind = "unavailable"
