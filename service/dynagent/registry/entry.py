"""What the registry holds per agent name: the stable version, the last refusal, the
canary and the revisions served. Frozen values: a change replaces them whole."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dynagent.exceptions import ConfigError
from dynagent.registry.canary import Pulled, RolloutPolicy, VariantStats
from dynagent.registry.gate import GateState
from dynagent.runtime.agent import Agent, Variant


@dataclass(frozen=True, slots=True)
class LastError:
    """Why the newest definition of an agent is not serving."""

    source: str
    path: str
    message: str
    at: float

    @classmethod
    def of(cls, error: ConfigError) -> LastError:
        return cls(error.source, error.path, str(error), time.time())

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "path": self.path, "message": self.message, "at": self.at}


@dataclass(frozen=True, slots=True)
class Canary:
    """A candidate version in front of a share of traffic."""

    agent: Agent
    policy: RolloutPolicy
    loaded_at: float
    pulled: Pulled | None = None
    """Set while it is out of traffic: by this replica's guard, or by ``rollout.paused``."""
    step_since: float = 0.0
    """Progressive rollouts: when the current step began (``rollout.step_at``, else when
    this replica saw the step first)."""
    step_ok: int = 0
    """Successful canary requests counted before the current step began."""
    gate: GateState | None = None
    """Set when ``rollout.gate`` asks for one: the canary takes live traffic only while
    its gate is open (passed, or forced)."""

    @property
    def serving(self) -> bool:
        return self.pulled is None

    @property
    def held(self) -> bool:
        """True while its gate keeps it from live traffic (shadow traffic still runs)."""
        return self.gate is not None and not self.gate.open

    def healthy(self, stats: VariantStats | None) -> int:
        """Successful requests in the current step."""
        return 0 if stats is None else max(0, stats.requests - stats.errors - self.step_ok)


@dataclass(frozen=True, slots=True)
class RevisionRecord:
    """One version an agent has served, kept for rollback and for the status."""

    revision: str
    variant: Variant
    loaded_at: float
    agent: Agent

    def as_dict(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "variant": self.variant,
            "loaded_at": self.loaded_at,
            "factory": self.agent.factory,
            "source": self.agent.source.as_dict(),
        }


@dataclass(frozen=True, slots=True)
class AgentEntry:
    """Everything the registry knows about one name; replaced whole, never mutated."""

    name: str
    stable: Agent | None = None
    last_error: LastError | None = None
    loaded_at: float = 0.0
    canary: Canary | None = None

    def status(self, stats: Mapping[Variant, VariantStats] | None = None) -> dict[str, Any]:
        agent = self.stable
        stats = stats or {}
        return {
            "name": self.name,
            "state": "serving" if agent else "refused",
            "revision": agent.revision if agent else None,
            "description": agent.spec.description if agent else "",
            "source": agent.source.status_dict() if agent else None,
            "factory": agent.factory if agent else None,
            "loaded_at": self.loaded_at or None,
            "last_error": self.last_error.as_dict() if self.last_error else None,
            "canary": self._canary_status(stats.get("canary")),
            "traffic": {variant: figures.summary() for variant, figures in stats.items()},
        }

    def _canary_status(self, stats: VariantStats | None) -> dict[str, Any] | None:
        canary = self.canary
        if canary is None:
            return None
        status = {
            "revision": canary.agent.revision,
            "weight": canary.policy.weight,
            "sticky_key": canary.policy.sticky_key,
            "state": "serving" if canary.serving else "pulled",
            "pulled": None
            if canary.pulled is None
            else {
                "reason": canary.pulled.reason,
                "at": canary.pulled.at,
                "by": canary.pulled.by,
                "recorded": canary.pulled.recorded,
            },
            "source": canary.agent.source.status_dict(),
            "loaded_at": canary.loaded_at,
            "guard": canary.policy.guard.model_dump(),
            "steps": _steps_status(canary, stats),
        }
        if canary.gate is not None:  # absent without ``rollout.gate``
            status["gate"] = canary.gate.as_dict()
        return status


def _steps_status(canary: Canary, stats: VariantStats | None) -> dict[str, Any] | None:
    """Where a progressive rollout stands: the step, since when, its healthy requests."""
    policy = canary.policy
    if policy.step is None or policy.step_after is None:
        return None
    return {
        "weights": list(policy.steps),
        "step": policy.step,
        "since": canary.step_since,
        "healthy_requests": canary.healthy(stats),
        "after": policy.step_after.model_dump(),
        "auto_promote": policy.auto_promote,
    }
