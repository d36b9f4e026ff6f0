"""opentelemetry-sdk's internals: where its tracer draws span ids from.

The SDK's ``Tracer`` keeps its id generator in ``id_generator``, which the API's
``Tracer`` type does not declare; the run tracer (``http/otel.py``) wraps it so that the
spans built from a run's events get the span ids their calls were made under.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from dynagent._compat.versions import Tested

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.id_generator import IdGenerator

TESTED = Tested("opentelemetry-sdk", "1.45.2", "1.46")
PRIVATE_PARTS: tuple[str, ...] = ()
"""Nothing at module level: ``id_generator``, which each tracer sets for itself, is
checked on a tracer by ``tests/runtime/test_compat.py``."""


def check() -> None:
    TESTED.check()


def wrap_id_generator(tracer: Any, wrap: Callable[[IdGenerator], IdGenerator]) -> None:
    """Have the SDK ``tracer`` draw its ids from ``wrap(its own generator)``."""
    tracer.id_generator = wrap(tracer.id_generator)
