"""pydantic validation errors in the words of the document's author.

pydantic says ``model.max_tokns: Extra inputs are not permitted`` and counts list
positions from 0 (``tools.1``). An author reads better ``unknown field 'max_tokns'
in model; did you mean 'max_tokens'?`` and ``tools[search]`` (the entry's own
name) or ``tools[#2]`` (its position, counted from 1).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from dynagent import _regex
from dynagent.exceptions import FieldIssue


def describe(error: ValidationError, model: type[BaseModel] | None, data: Any) -> list[FieldIssue]:
    """One issue per pydantic error."""
    found = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        path = document_path(loc, data)
        message = item["msg"]
        if item["type"] == "extra_forbidden" and loc:
            message = unknown_field(str(loc[-1]), loc[:-1], model, path.rsplit(".", 1)[0])
        found.append(FieldIssue(path, message))
    return found


def document_path(loc: tuple[int | str, ...], data: Any) -> str:
    """``('tools', 1, 'timeout')`` → ``tools[search].timeout``, or ``tools[#2].timeout``
    when the entry has no name of its own."""
    parts: list[str] = []
    node = data
    for part in loc:
        if isinstance(part, int):
            item = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            label = _entry_name(item)
            parts[-1:] = [f"{parts[-1] if parts else ''}[{label or f'#{part + 1}'}]"]
            node = item
        else:
            parts.append(part.replace("schema_", "schema"))
            node = node.get(part) if isinstance(node, Mapping) else None
    return ".".join(parts)


NAME = _regex.compile(r"[A-Za-z0-9_-]{1,64}")
"""What may label an entry in a path; any other name (hostile, or the error itself)
is left out and the entry counted instead."""


def _entry_name(item: Any) -> str | None:
    if isinstance(item, Mapping):
        shorthand = len(item) == 1 and isinstance(next(iter(item.values())), Mapping | None)
        item = item.get("name", next(iter(item)) if shorthand else None)
    return item if isinstance(item, str) and NAME.fullmatch(item) else None


def unknown_field(
    field: str, parent: tuple[int | str, ...], model: type[BaseModel] | None, where: str
) -> str:
    known = sorted(_fields_at(parent, model)) if model is not None else []
    place = f" in {where}" if parent and where else ""
    message = f"unknown field {field!r}{place}"
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.6)
    if close:
        return f"{message}; did you mean {close[0]!r}?"
    if known:
        return f"{message}; known fields: {', '.join(known)}"
    return message


def _fields_at(loc: tuple[int | str, ...], model: type[BaseModel]) -> set[str]:
    """Field names (aliases where set) of the models that may sit at ``loc``."""
    candidates: list[Any] = [model]
    for part in loc:
        following: list[Any] = []
        for annotation in candidates:
            for inner in _unwrap(annotation):
                if isinstance(part, int):
                    args = typing.get_args(inner)
                    if typing.get_origin(inner) in (list, tuple) and args:
                        following.append(args[0])
                elif isinstance(inner, type) and issubclass(inner, BaseModel):
                    field = inner.model_fields.get(part) or _by_alias(inner, part)
                    if field is not None:
                        following.append(field.annotation)
                elif typing.get_origin(inner) is dict and len(typing.get_args(inner)) == 2:
                    following.append(typing.get_args(inner)[1])
        candidates = following
    names: set[str] = set()
    for annotation in candidates:
        for inner in _unwrap(annotation):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                names.update(f.alias or n for n, f in inner.model_fields.items())
    return names


def _by_alias(model: type[BaseModel], alias: str) -> Any:
    return next((f for f in model.model_fields.values() if f.alias == alias), None)


def _unwrap(annotation: Any) -> list[Any]:
    """The plain types inside ``Annotated[...]``, unions and optionals; an annotation
    that validates with models of its own choosing (``ToolEntries``) says which."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        chosen = [m.models() for m in metadata if callable(getattr(m, "models", None))]
        return _unwrap(inner) + [model for models in chosen for model in models]
    if origin is typing.Union or origin is types.UnionType:
        return [t for arg in typing.get_args(annotation) for t in _unwrap(arg)]
    return [annotation]
