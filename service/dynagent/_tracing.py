"""W3C trace context for outgoing calls (model, HTTP tools): the ``traceparent`` of the run's
span while OpenTelemetry traces it (the ``otel`` extra); nothing otherwise."""

from __future__ import annotations

try:
    from opentelemetry import propagate, trace
except ImportError:  # the otel extra is not installed
    propagate = None  # type: ignore[assignment]


def outgoing_headers() -> dict[str, str]:
    """Headers that make the callee's spans children of the current run's span."""
    if propagate is None or not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
