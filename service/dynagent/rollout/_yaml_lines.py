"""A rollout decision written into a YAML document line by line.

A canary file is a person's document: its comments explain the weight, the guard, how to
end it. Dumping the parsed document again would drop every comment and requote every
string, so a decision (a pause, a resume, a step) rewrites only the lines of the
``rollout`` entries it changes, each as one flow-style line. The caller parses the result
and keeps it only when it reads back as the intended document.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

_ABSENT = object()


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def _is_key(line: str, key: str) -> bool:
    """``line`` (without its indentation) starts the mapping entry ``key``."""
    return line.startswith(key) and line[len(key) :].lstrip(" \t").startswith(":")


def _flow(value: Any) -> str:
    """One line of YAML for ``value`` (JSON is a subset of YAML's flow style)."""
    return json.dumps(value, ensure_ascii=False)


def _top_level_span(lines: list[str], key: str) -> tuple[int, int] | None:
    """Lines ``[start, end)`` of the top-level entry ``key``."""
    start = next((i for i, line in enumerate(lines) if _is_key(line, key)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " \t#"):
        end += 1
    return start, end


def _entry_span(body: list[str], indent: str, key: str) -> tuple[int, int] | None:
    """Lines ``[start, end)`` of ``key`` in a block at ``indent`` (its own nested lines
    included, blank lines after it not)."""
    start = next(
        (
            i
            for i, line in enumerate(body)
            if line.startswith(indent) and _is_key(line[len(indent) :], key)
        ),
        None,
    )
    if start is None:
        return None
    end = start + 1
    while end < len(body) and (not body[end].strip() or _indent(body[end]) > len(indent)):
        end += 1
    while end > start + 1 and not body[end - 1].strip():
        end -= 1
    return start, end


def _edit_block(body: list[str], before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    """Rewrite, in ``body`` (the lines under ``rollout:``), the entries that differ; False
    when the block has no entry to take the indentation from."""
    first = next((line for line in body if line.strip() and not line.lstrip().startswith("#")), "")
    if not first:
        return False
    indent = first[: _indent(first)]
    for key in sorted(set(before) | set(after)):
        if before.get(key, _ABSENT) == after.get(key, _ABSENT):
            continue
        span = _entry_span(body, indent, key)
        new = [f"{indent}{key}: {_flow(after[key])}\n"] if key in after else []
        if span is not None:
            body[span[0] : span[1]] = new
        else:
            last = max(i for i, line in enumerate(body) if line.strip() and line[0] in " \t")
            body[last + 1 : last + 1] = new
    return True


def edited_lines(
    text: str, key: str, before: Mapping[str, Any], after: Mapping[str, Any]
) -> str | None:
    """``text`` with the entries of its top-level mapping ``key`` that differ between
    ``before`` and ``after`` rewritten in place; every other line (comments included) as
    it was. None when ``key`` is not laid out as this can edit."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    span = _top_level_span(lines, key)
    if span is None:
        return None
    start, end = span
    head = lines[start]
    value = head.split(":", 1)[1]
    comment = value.find(" #")
    if (value[:comment] if comment >= 0 else value).strip():  # `rollout: {weight: 10}`
        trailing = value[len(value[:comment].rstrip()) :].rstrip("\n") if comment >= 0 else ""
        lines[start] = f"{key}: {_flow(dict(after))}{trailing}\n"
        return "".join(lines)
    body = lines[start + 1 : end]
    if not _edit_block(body, before, after):
        return None
    lines[start + 1 : end] = body
    return "".join(lines)
