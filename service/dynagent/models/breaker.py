"""Circuit breakers: stop calling a model endpoint that keeps failing.

One breaker per endpoint (base URL and model name), kept by the ``ClientPool``
beside the clients, so what an endpoint did outlives every agent rebuild. Each
call brings the policy of its own agent: agents on one endpoint share its
record, and each decides with its own threshold and cooldown.

Closed, calls go through and count consecutive failures; at ``failures`` the
circuit opens and calls fail fast with ``CircuitOpen``, sending nothing; after
``cooldown`` seconds one trial call goes through (half-open): success closes
the circuit, failure opens it for another cooldown.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from loguru import logger

from dynagent.exceptions import CircuitOpen, ModelError

State = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failures: int = 5
    """Consecutive failed calls (each retry counts) that open the circuit."""
    cooldown: float = 30.0
    """Seconds an open circuit fails fast before it lets one trial call through."""


def endpoint_name(base_url: str, model: str) -> str:
    """``gpt-4o at https://api.openai.com/v1``, without any credentials in the URL."""
    parts = urlsplit(base_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return f"{model} at {urlunsplit(parts._replace(netloc=host))}"


def unwell(error: ModelError) -> bool:
    """Whether ``error`` says the endpoint is unwell (timeouts, dropped connections, 429,
    5xx, malformed answers); a 4xx answer shows it alive and well."""
    return error.retryable or error.status is None


class CircuitBreaker:
    """The record of one endpoint: consecutive failures, when the last one happened."""

    def __init__(self, endpoint: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = endpoint
        self.failures = 0
        """Consecutive failed calls; any success resets it."""
        self._clock = clock
        self._failed_at = 0.0
        self._last_error = ""
        self._probing = False

    def state(self, policy: BreakerPolicy) -> State:
        if self.failures < policy.failures:
            return "closed"
        return "open" if self._remaining(policy) > 0 else "half_open"

    def admit(self, policy: BreakerPolicy) -> Permit:
        """A permit for one call; raises ``CircuitOpen`` while calls must fail fast."""
        state = self.state(policy)
        if state == "closed":
            return Permit(self, policy)
        if state == "half_open" and not self._probing:
            self._probing = True
            logger.info("circuit half-open for {}: one trial call", self.endpoint)
            return Permit(self, policy, probe=True)
        raise self.rejection(policy)

    def rejection(self, policy: BreakerPolicy) -> CircuitOpen:
        """The error for a call refused now (while open, or while the trial call runs)."""
        remaining = self._remaining(policy)
        return CircuitOpen(
            self.endpoint,
            remaining if remaining > 0 else policy.cooldown,
            self.failures,
            self._last_error,
        )

    def _remaining(self, policy: BreakerPolicy) -> float:
        return policy.cooldown - (self._clock() - self._failed_at)

    def _succeeded(self, probe: bool) -> None:
        if probe:
            self._probing = False
        if self.failures:
            logger.info("circuit closed for {}: the endpoint answered again", self.endpoint)
        self.failures = 0

    def _failed(self, policy: BreakerPolicy, error: ModelError, probe: bool) -> None:
        if probe:
            self._probing = False
        self.failures += 1
        self._failed_at = self._clock()
        self._last_error = error.message
        if probe or self.failures == policy.failures:
            logger.warning(
                "circuit open for {} after {} consecutive failures (last: {}); "
                "failing fast for {:g} s",
                self.endpoint,
                self.failures,
                error.message,
                policy.cooldown,
            )


class Permit:
    """One admitted call; settled once, by its outcome, or released when abandoned."""

    __slots__ = ("_breaker", "_done", "_policy", "_probe")

    def __init__(
        self, breaker: CircuitBreaker | None, policy: BreakerPolicy, *, probe: bool = False
    ) -> None:
        self._breaker = breaker
        self._policy = policy
        self._probe = probe
        self._done = breaker is None

    @classmethod
    def unguarded(cls) -> Permit:
        """For a model without a breaker: settling it does nothing."""
        return cls(None, BreakerPolicy())

    def succeeded(self) -> None:
        if not self._done and self._breaker is not None:
            self._done = True
            self._breaker._succeeded(self._probe)

    def settle(self, error: ModelError) -> ModelError:
        """Record the call's error (a failure only if it says the endpoint is unwell)."""
        if not unwell(error):
            self.succeeded()
        elif not self._done and self._breaker is not None:
            self._done = True
            self._breaker._failed(self._policy, error, self._probe)
        return error

    def release(self) -> None:
        """The call was abandoned (cancelled): it says nothing about the endpoint."""
        if not self._done and self._breaker is not None:
            self._done = True
            if self._probe:
                self._breaker._probing = False
