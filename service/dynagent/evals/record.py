"""The suite an agent has now, as its status shows it (``evals``).

A refused suite never replaces a good one: the last good suite is kept beside the
refusal, as the last good version of an agent is.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dynagent.evals.spec import EvalSuite
from dynagent.exceptions import ConfigError

KIND = "evals"
"""The key of the suite in an agent's status and attachments."""


@dataclass(frozen=True, slots=True)
class SuiteRecord:
    suite: EvalSuite | None
    """The last good suite, if any."""
    source: str
    """Where the last good suite came from."""
    loaded_at: float
    error: ConfigError | None = None
    """Why the newest version of the suite was refused, if it was."""
    error_at: float = 0.0

    @classmethod
    def accepted(cls, suite: EvalSuite, source: str) -> SuiteRecord:
        return cls(suite, source, time.time())

    def refused(self, error: ConfigError) -> SuiteRecord:
        return SuiteRecord(self.suite, self.source, self.loaded_at, error, time.time())

    def status(self) -> dict[str, Any]:
        suite = self.suite
        return {
            "state": "refused" if self.error is not None else "valid",
            "revision": suite.revision if suite else None,
            "cases": len(suite.cases) if suite else 0,
            "needs_judge": suite.needs_judge if suite else 0,
            "source": self.source or None,
            "loaded_at": self.loaded_at or None,
            "last_error": None
            if self.error is None
            else {
                "source": self.error.source,
                "path": self.error.path,
                "message": str(self.error),
                "at": self.error_at,
            },
        }
