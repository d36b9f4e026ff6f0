"""What the HTTP layer asks of a run tracer (OpenTelemetry, in ``http/otel.py``, when the
``otel`` extra is installed and ``OTEL_*`` configures an exporter)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from dynagent.events import Event
from dynagent.runtime.agent import Agent, Variant


class RunTracer(Protocol):
    def start(self, name: str, headers: Mapping[str, str]) -> Any:
        """Open the run's span (child of the caller's ``traceparent``) and make it current;
        returns a handle for ``finish``."""
        ...

    def start_shadow(self, name: str, stable: Any) -> Any:
        """Open a shadow run's span (a child of the stable run's, ``stable`` being the handle
        ``start`` gave for it, if any) and make it current in this task."""
        ...

    def finish(
        self,
        handle: Any,
        agent: Agent,
        variant: Variant,
        events: Sequence[Event],
        error: str | None,
    ) -> None:
        """Close the run's span, with the model and tool spans its events describe."""
        ...

    def detach(self, handle: Any) -> None:
        """Stop being the current span of this task (the run's span stays open)."""
        ...

    async def aclose(self) -> None: ...
