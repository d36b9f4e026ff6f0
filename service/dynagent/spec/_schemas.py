"""JSON Schema validators whose regular expressions run in linear time.

``jsonschema`` matches ``pattern`` and ``patternProperties`` with Python's
backtracking ``re``: an output schema's ``"pattern": "^(a+)+$"`` or an MCP
server's tool schema would let one model answer stall the service. The
validators made here match those keywords with RE2 (``_regex``); a pattern RE2
cannot compile is refused when the validator is made, and so is
``unevaluatedProperties`` beside ``patternProperties`` (jsonschema evaluates
that pair with ``re`` internally).

Patterns come from outside (a caller's ``response_format``), so what they cost is
bounded too: each at most ``MAX_PATTERN_CHARS`` long with ``PATTERN_MEMORY`` for RE2,
a schema's together at most ``MAX_SCHEMA_PROGRAM`` of RE2 program, and the compiled
ones kept in a cache bounded in bytes (``CACHE_BYTES``). An 80,000-branch pattern
compiled on the event loop once stalled it 2.65 s, and 20 of them kept 500 MB.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jsonschema
import referencing
import referencing.exceptions
from jsonschema.exceptions import ValidationError

from dynagent import _regex
from dynagent.spec._refs import check_refs

Validator = jsonschema.Draft202012Validator
_ORIGINAL_ADDITIONAL: Callable[..., Iterator[ValidationError]] = Validator.VALIDATORS[
    "additionalProperties"
]


MAX_PATTERN_CHARS = 1000
"""The longest ``pattern`` (or ``patternProperties`` key) a schema may hold."""
PATTERN_MEMORY = 1024 * 1024
"""RE2's memory for one pattern's program and matching caches (its ``max_mem``, 8 MiB by
default): a program that needs more is refused. Compiling the largest pattern left costs
~30 ms; less memory would make RE2 give up its DFA for slower matching sooner."""
MAX_SCHEMA_PROGRAM = 32_000
"""RE2 program instructions of a schema's patterns together (one or two of the largest)."""
CACHE_BYTES = 64 * 1024 * 1024
"""What the compiled patterns kept for reuse may hold, each counted at its worst:
``PATTERN_MEMORY`` plus ``_BYTES_PER_INSTRUCTION`` for each instruction of its program."""
_BYTES_PER_INSTRUCTION = 128
"""Resident bytes per program instruction besides RE2's own budget (the parsed pattern and
its wrappers), measured with google-re2 1.1."""


class _PatternCache:
    """Compiled patterns, least recently used out first, within ``CACHE_BYTES``."""

    def __init__(self, budget: int) -> None:
        self._budget = budget
        self._held = 0
        self._patterns: OrderedDict[str, tuple[_regex.Pattern, int]] = OrderedDict()
        self._lock = threading.Lock()  # schemas are checked and used in worker threads too

    def get(self, pattern: str) -> _regex.Pattern:
        with self._lock:
            found = self._patterns.get(pattern)
            if found is not None:
                self._patterns.move_to_end(pattern)
                return found[0]
        if len(pattern) > MAX_PATTERN_CHARS:
            raise ValueError(f"longer than {MAX_PATTERN_CHARS} characters")
        compiled = _regex.compile(pattern, max_mem=PATTERN_MEMORY)
        cost = PATTERN_MEMORY + compiled.program_size * _BYTES_PER_INSTRUCTION
        with self._lock:
            if pattern not in self._patterns:
                self._patterns[pattern] = (compiled, cost)
                self._held += cost
            while self._held > self._budget and len(self._patterns) > 1:
                _, (_, freed) = self._patterns.popitem(last=False)
                self._held -= freed
        return compiled

    @property
    def held(self) -> int:
        """The estimated bytes the cached patterns hold."""
        return self._held


_CACHE = _PatternCache(CACHE_BYTES)


def compiled_pattern(pattern: str) -> _regex.Pattern:
    """``pattern`` compiled by RE2 within the bounds of a caller's pattern (length, program
    memory), from the shared cache; ``ValueError`` or ``_regex.error`` when refused."""
    return _CACHE.get(pattern)


_compiled = compiled_pattern


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and _compiled(pattern).search(instance) is None:
        shown = instance if len(instance) <= 80 else instance[:77] + "..."
        yield ValidationError(f"{shown!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _compiled(pattern).search(key) is not None:
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    patterns = schema.get("patternProperties")
    if not patterns or not validator.is_type(instance, "object"):
        yield from _ORIGINAL_ADDITIONAL(validator, additional, instance, schema)
        return
    known = schema.get("properties", {})
    extras = sorted(
        str(key)
        for key in instance
        if key not in known and not any(_compiled(p).search(key) for p in patterns)
    )
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield ValidationError(
            f"{', '.join(map(repr, extras))} not allowed: they match none of "
            f"{', '.join(map(repr, sorted(patterns)))}"
        )


_Linear = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
    },
)


def check_patterns(schema: Any) -> None:
    """Raise ``ValueError`` naming the first pattern RE2 refuses or that is too large,
    patterns too large together, or the ``unevaluatedProperties`` +
    ``patternProperties`` pair. The walk is iterative: no stack, whatever the depth."""
    program = 0
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        patterns = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        if isinstance(node.get("patternProperties"), dict):
            patterns += list(node["patternProperties"])
            if "unevaluatedProperties" in node:
                raise ValueError("unevaluatedProperties beside patternProperties is not supported")
        for pattern in patterns:
            program += _checked_pattern(pattern)
            if program > MAX_SCHEMA_PROGRAM:
                raise ValueError(
                    f"the schema's patterns are too large together (more than "
                    f"{MAX_SCHEMA_PROGRAM} RE2 instructions); use fewer or simpler ones"
                )
        todo.extend(node.values())


def _checked_pattern(pattern: str) -> int:
    shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
    try:
        return _compiled(pattern).program_size
    except _regex.error as exc:
        reason = _reason(exc)
        if "too large" in reason:
            reason = f"{reason}: more than RE2's {PATTERN_MEMORY // 1024} KiB for one pattern"
        raise ValueError(
            f"pattern {shown!r} is not supported ({reason}): patterns are matched "
            "by RE2, in linear time; lookaround and backreferences are not available"
        ) from None
    except ValueError as exc:  # too long, or not encodable as UTF-8 (a lone surrogate)
        raise ValueError(f"pattern {shown!r} is not supported: {exc}") from None


def check_json_schema(value: Any) -> None:
    """Raise ``ValueError`` for a JSON Schema a definition may not hold (``check_schema``)."""
    check_schema(value)


def _reason(exc: Exception) -> str:
    reason = exc.args[0] if exc.args else exc
    return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def _refuse(uri: str) -> referencing.Resource[Any]:
    raise referencing.exceptions.NoSuchResource(uri)


_NO_RETRIEVAL: referencing.Registry[Any] = referencing.Registry(retrieve=_refuse)  # type: ignore[call-arg]
"""Where validators look up ``$ref`` targets: nowhere outside the schema. jsonschema's
default registry fetches any URL (with no timeout, on the calling thread) and reads
``file://`` paths; a caller's ``$ref: http://…`` froze the whole service."""

_META = Validator(
    Validator.META_SCHEMA,
    format_checker=jsonschema.FormatChecker(
        [name for name in Validator.FORMAT_CHECKER.checkers if name != "regex"]
    ),
)
"""The metaschema check without its ``format: regex``, which compiles every pattern with
Python's ``re`` (slow on a large pattern, deep recursion on a nested one, and a cache of
its own); ``check_patterns`` compiles them with RE2, within bounds, instead."""


def check_schema(schema: Any) -> None:
    """Everything a schema from outside must satisfy before it is used, as one
    ``ValueError`` naming what is wrong: a valid Draft 2020-12 schema, patterns RE2
    can run, and references that stay inside it."""
    try:
        error = jsonschema.exceptions.best_match(_META.iter_errors(schema))
    except RecursionError:
        raise ValueError("the schema nests too deeply") from None
    if error is not None:
        raise ValueError(f"not a valid JSON Schema: {error.message}")
    check_patterns(schema)
    check_refs(schema)


def validator(schema: Mapping[str, Any]) -> Validator:
    """A Draft 2020-12 validator for ``schema`` matching its patterns with RE2 and
    resolving references only inside it."""
    check_patterns(schema)
    check_refs(schema)
    made: Validator = _Linear(schema, registry=_NO_RETRIEVAL)
    return made


_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "$comment", "deprecated", "readOnly"}
)
_OBJECT_KEYS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_SCALARS: Mapping[str, Callable[[Any], bool]] = {
    "string": lambda value: type(value) is str,
    "integer": lambda value: type(value) is int,
    "number": lambda value: type(value) is int or type(value) is float,
    "boolean": lambda value: type(value) is bool,
}


def _anything(value: Any) -> bool:
    return True


def _scalar_test(schema: Any) -> Callable[[Any], bool] | None:
    """The type test of a property schema that is only a scalar ``type`` (and annotations)."""
    if not isinstance(schema, dict) or not set(schema) <= _ANNOTATIONS | {"type"}:
        return None
    if "type" not in schema:
        return _anything
    kind = schema["type"]
    return _SCALARS.get(kind) if isinstance(kind, str) else None


def quick_check(schema: Mapping[str, Any]) -> Callable[[Any], bool] | None:
    """For the shape most tool schemas have (an object of scalar-typed properties, some
    required, maybe no others): a test that is True only for values the full validator
    accepts; False means "ask the full validator", which also says what is wrong.

    It stands in for the JSON Schema engine on every valid call (about 15 µs a call with
    ``jsonschema``, under 1 µs here); ``None`` for any other schema."""
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if (
        not set(schema) <= _OBJECT_KEYS
        or schema.get("type") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not all(isinstance(name, str) for name in required)
        or type(additional) is not bool
    ):
        return None
    typed: list[tuple[str, Callable[[Any], bool]]] = []
    for name, sub in properties.items():
        test = _scalar_test(sub)
        if test is None:
            return None
        if test is not _anything:
            typed.append((name, test))
    needed, known = tuple(required), frozenset(properties)
    closed = not additional

    def check(value: Any) -> bool:
        if type(value) is not dict:
            return False
        if closed and not known.issuperset(value):
            return False
        if not all(name in value for name in needed):
            return False
        return all(test(value[name]) for name, test in typed if name in value)

    return check
