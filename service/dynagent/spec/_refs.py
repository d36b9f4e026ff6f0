"""References inside a JSON Schema: only to itself, to something there, never in a loop.

A schema from outside resolves ``$ref`` and ``$dynamicRef`` only inside itself (``#``,
``#/json/pointer``, ``#anchor``): nothing is fetched or read. A reference that leads back
to where it started without descending into the instance (``{"$ref": "#"}``, two
``$defs`` naming each other through ``allOf``) would make every validation recurse until
the stack ends; it is refused with the schema, not met at validation time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote

_REF_KEYS = ("$ref", "$dynamicRef")
_IN_PLACE_ONE = ("not", "if", "then", "else")
"""Keywords applying one subschema to the same instance."""
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
"""Keywords applying a list of subschemas to the same instance."""


def check_refs(schema: Any) -> None:
    """Raise ``ValueError`` for a ``$ref`` that points outside ``schema``, at nothing in
    it, or round in a loop. The walks are iterative: a deep schema costs time linear in
    its size and no stack."""
    refs: list[str] = []
    anchors: dict[str, Any] = {}
    todo = [schema]
    while todo:
        node = todo.pop()
        if isinstance(node, list):
            todo.extend(node)
        elif isinstance(node, dict):
            for key in _REF_KEYS:
                if isinstance(node.get(key), str):
                    refs.append(node[key])
            for key in ("$anchor", "$dynamicAnchor"):
                if isinstance(node.get(key), str):
                    anchors[node[key]] = node
            todo.extend(node.values())
    for ref in refs:
        if not ref.startswith("#"):
            raise ValueError(
                f"$ref {ref[:200]!r} points outside the schema: only references inside it "
                "('#/$defs/…' or '#anchor') are resolved, nothing is fetched or read"
            )
        if _target(schema, anchors, ref) is None:
            raise ValueError(f"$ref {ref[:200]!r} points at nothing in the schema")
    _check_loops(schema, anchors)


def _target(schema: Any, anchors: dict[str, Any], ref: str) -> Any:
    fragment = ref[1:]
    if fragment[:1] not in ("", "/"):
        return anchors.get(fragment)
    node = schema
    for raw in fragment.split("/")[1:]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _in_place(schema: Any, anchors: dict[str, Any], node: Any) -> Iterator[Any]:
    """The subschemas ``node`` applies to the instance it is given (not to a part of it)."""
    if not isinstance(node, dict):
        return
    for key in _REF_KEYS:
        if isinstance(node.get(key), str) and node[key].startswith("#"):
            yield _target(schema, anchors, node[key])
    for key in _IN_PLACE_ONE:
        if key in node:
            yield node[key]
    for key in _IN_PLACE_MANY:
        if isinstance(node.get(key), list):
            yield from node[key]
    if isinstance(node.get("dependentSchemas"), dict):
        yield from node["dependentSchemas"].values()


def _check_loops(schema: Any, anchors: dict[str, Any]) -> None:
    """Depth-first over the in-place edges, iteratively; a node met again while it is
    still being walked closes a loop."""
    done: set[int] = set()
    roots: list[Any] = [schema]
    while roots:
        root = roots.pop()
        if isinstance(root, list):
            roots.extend(root)
            continue
        if not isinstance(root, dict):
            continue
        roots.extend(root.values())
        if id(root) in done:
            continue
        walking: set[int] = {id(root)}
        stack = [(root, _in_place(schema, anchors, root))]
        while stack:
            node, edges = stack[-1]
            following = next(edges, None)
            if following is None:
                stack.pop()
                walking.discard(id(node))
                done.add(id(node))
            elif id(following) in walking:
                raise ValueError(
                    "the schema's references go round in a loop that never descends into "
                    "the value (e.g. {'$ref': '#'}): validating anything would never end"
                )
            elif isinstance(following, dict) and id(following) not in done:
                walking.add(id(following))
                stack.append((following, _in_place(schema, anchors, following)))
