"""W3C trace context for outgoing calls (model, HTTP and MCP tools): the ``traceparent`` of
the innermost span of the run while OpenTelemetry traces it (the ``otel`` extra); nothing
otherwise.

A run's ``chat`` and ``execute_tool`` spans are built from its events when it ends
(``http/otel.py``), so none of them exists while its call is on the wire. Their span ids are
therefore derived, not drawn: ``child_span_id(run span, call)`` names the span of one model
call (``chat {step}``) or tool call (``tool {step} {call id}``). While the call runs,
``within`` makes a stand-in with that id the current span, so whatever the call sends — our
``outgoing_headers``, the MCP SDK's ``params._meta``, any instrumented client — names it as
the parent, and the tracer later gives the span it builds the same id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the otel extra is not installed
    propagate = None  # type: ignore[assignment]

RUN_SPAN = "dynagent.run_span"
"""The key, in the OpenTelemetry context, of the span id of a run whose children are built
from its events (set by the tracer that builds them)."""


_UNTRACED = nullcontext()


def within(call: str) -> AbstractContextManager[None]:
    """The model or tool call ``call`` of the current run is under way.

    Only directly under a run's span: inside a tool call (an agent called as a tool, whose
    run has no span of its own) the tool's span stays current, and so does a caller's own
    span when no tracer of ours is at work. Untraced, this costs a dictionary look-up."""
    if propagate is None or otel_context.get_value(RUN_SPAN) is None:
        return _UNTRACED
    return _stand_in(call)


@contextmanager
def _stand_in(call: str) -> Iterator[None]:
    current = trace.get_current_span().get_span_context()
    if not current.is_valid or otel_context.get_value(RUN_SPAN) != current.span_id:
        yield
        return
    stand_in = trace.NonRecordingSpan(
        trace.SpanContext(
            current.trace_id,
            child_span_id(current.span_id, call),
            is_remote=False,
            trace_flags=current.trace_flags,
            trace_state=current.trace_state,
        )
    )
    token = otel_context.attach(trace.set_span_in_context(stand_in))
    try:
        yield
    finally:
        otel_context.detach(token)


def child_span_id(run_span_id: int, call: str) -> int:
    """The span id of ``call``'s span under the run's span: the same on both sides."""
    digest = hashlib.blake2b(f"{run_span_id:016x} {call}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1  # 0 is the invalid span id


def outgoing_headers() -> dict[str, str]:
    """Headers that make the callee's spans children of the current span."""
    if propagate is None or not trace.get_current_span().get_span_context().is_valid:
        return {}
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier
