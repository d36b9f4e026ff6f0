"""Bounds on agent documents, checked before and after parsing.

A definition comes from whoever may edit the config center, so parsing it must
not be a way to stop the service: a size cap, a nesting cap (the YAML composer
and ``json`` recurse), and a cap on how far YAML aliases expand — PyYAML's
``safe_load`` shares aliased nodes, but merge keys copy them while loading and
validation and hashing walk them expanded, so a few hundred bytes of anchors
("billion laughs") would otherwise take minutes and gigabytes.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DOCUMENT_CHARS = 1_000_000
"""Longest document accepted (the file source refuses larger files the same way)."""
MAX_DEPTH = 64
"""Deepest nesting of mappings and lists."""
MAX_NODES = 100_000
"""Most values a document may hold once every alias is expanded."""
MAX_EXPANDED_CHARS = 2 * MAX_DOCUMENT_CHARS
"""Most characters of text a document may hold once every alias is expanded: a 450,000-
character scalar aliased 2,000 times passed the node count and took 1.9 GB to validate
and hash. Validation, the revision hash and every copy of the spec walk the expanded
document, so bounding it bounds them all."""


SAFE_LOADER = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader
"""libyaml's safe loader where PyYAML has it (parsing a typical agent is ~8x faster,
which 1,000 agents loaded at once feel), else the pure-Python one. Both build plain
values only; their errors differ in wording, see ``yaml_problem``."""


class DocumentRefused(ValueError):
    """The document breaks one of the bounds above; the message says which."""


def check_text(text: str) -> None:
    if len(text) > MAX_DOCUMENT_CHARS:
        raise DocumentRefused(f"the document is longer than {MAX_DOCUMENT_CHARS} characters")


def check_yaml_events(text: str) -> None:
    """Walk the YAML event stream (no recursion, nothing built) and refuse a document
    that nests too deep or whose aliases expand past ``MAX_NODES`` values or
    ``MAX_EXPANDED_CHARS`` characters."""
    sizes: dict[str, tuple[int, int]] = {}
    """Expanded size (values, characters) of each anchored node."""
    open_nodes: list[tuple[str | None, int, int]] = [(None, 0, 0)]
    """(anchor, values, characters so far) of every collection being read; the document
    at the bottom."""
    for event in yaml.parse(text, Loader=SAFE_LOADER):
        if isinstance(event, yaml.CollectionStartEvent):
            open_nodes.append((event.anchor, 1, 1))
            if len(open_nodes) - 1 > MAX_DEPTH:
                raise DocumentRefused(f"the document nests deeper than {MAX_DEPTH} levels")
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, size, chars = open_nodes.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, size, chars = event.anchor, 1, len(event.value) + 1
        elif isinstance(event, yaml.AliasEvent):
            anchor = None
            size, chars = sizes.get(event.anchor or "", (1, 1))
        else:
            continue
        if anchor is not None:
            sizes[anchor] = (size, chars)
        parent_anchor, parent_size, parent_chars = open_nodes[-1]
        open_nodes[-1] = (parent_anchor, parent_size + size, parent_chars + chars)
        _check_expanded(parent_size + size, parent_chars + chars)


def _check_expanded(size: int, chars: int) -> None:
    if size > MAX_NODES:
        raise DocumentRefused(
            f"the document holds more than {MAX_NODES} values once its aliases are "
            "expanded; write it out without repeated anchors"
        )
    if chars > MAX_EXPANDED_CHARS:
        raise DocumentRefused(
            f"the document holds more than {MAX_EXPANDED_CHARS} characters once its aliases "
            "are expanded; write it out without repeated anchors"
        )


def yaml_problem(text: str, error: yaml.YAMLError) -> str:
    """What is wrong with ``text``, as the pure-Python parser words it: libyaml's
    messages leave out the offending line, which is what a reader needs."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            # Stop where check_yaml_events would: the pure-Python parser takes time
            # quadratic in the nesting (20,000 levels, 40 kB: 35 s) of a document
            # that libyaml refused for nesting.
            depth += isinstance(event, yaml.CollectionStartEvent)
            depth -= isinstance(event, yaml.CollectionEndEvent)
            if depth > MAX_DEPTH:
                return f"the document nests deeper than {MAX_DEPTH} levels"
    except yaml.YAMLError as detailed:
        return located(text, detailed)
    return located(text, error)


def located(text: str, error: yaml.YAMLError) -> str:
    """``line L, column C: problem (context): "the offending line"``, on one line,
    counted from 1 as editors count; PyYAML's own text spans several lines."""
    if not isinstance(error, yaml.MarkedYAMLError) or error.problem_mark is None:
        return " ".join(str(error).split())
    mark = error.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}"
    problem = error.problem or "invalid YAML"
    context = error.context_mark
    if error.context and context is not None and context.line != mark.line:
        problem += f" ({error.context} at line {context.line + 1}, column {context.column + 1})"
    elif error.context:
        problem += f" ({error.context})"
    lines = text.splitlines()
    # At the end of the text (an unclosed bracket or quote) the opening line is the one to show.
    line = mark.line if mark.line < len(lines) or context is None else context.line
    shown = lines[line].strip() if line < len(lines) else ""
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return f"{where}: {problem}: {shown!r}" if shown else f"{where}: {problem}"


def check_values(value: Any) -> None:
    """Refuse parsed data that nests too deep, or holds text that is not valid
    Unicode (a lone surrogate from a ``\\ud800`` escape can never be sent on)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise DocumentRefused(f"the document nests deeper than {MAX_DEPTH} levels")
        if isinstance(item, str):
            _check_unicode(item)
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, depth + 1))
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)


def _check_unicode(text: str) -> None:
    bad = not_unicode(text)
    if bad is not None:
        raise DocumentRefused(f"text holds {bad}, which is not valid Unicode")


def not_unicode(text: str) -> str | None:
    """The first characters of ``text`` that UTF-8 cannot encode (an unpaired surrogate),
    shown as escaped (``'\\ud800'``); None when it is all valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ascii(text[exc.start : exc.end])
    return None
