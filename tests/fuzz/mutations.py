"""Hostile agent documents for property-based tests: the shipped samples, mutated.

``hostile_documents()`` draws ``(text, fmt)``: a sample with keys dropped or
duplicated, values of the wrong type, huge or odd Unicode strings, deep nesting,
code-reaching YAML tags, alias bombs, then maybe truncated at a random byte.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import yaml

ROOT = Path(__file__).parents[2]
SAMPLES = {
    path.stem: yaml.safe_load(path.read_text(encoding="utf-8"))
    for path in sorted((ROOT / "config-samples" / "agents").glob("*.yaml"))
    # Self-contained samples only: one whose tools are an MCP server or another agent
    # builds or not depending on what else the service runs, which the hostile-document
    # runs (a bare folder, one Nacos dataId) do not model. Their entries are fuzzed in
    # tests/mcp instead.
    if ".evals." not in path.name  # an evaluation suite, not an agent
    and "type: mcp" not in (text := path.read_text(encoding="utf-8"))
    and "type: agent" not in text
}
Path_ = tuple[str | int, ...]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["", "${HOME}", "${SECRET}", "{{x}}", "os.system", "../../etc/passwd"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
odd_text = st.one_of(
    st.text(min_size=1, max_size=200),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=50),
    st.integers(min_value=10_000, max_value=300_000).map(lambda n: "é" * n),
    st.sampled_from(
        ["\u202e", "\ufeff", "\x00", "\U0001d54f" * 3, "{{ __import__('os') }}", "{% if 1 %}"]
    ),
)


def _paths(node: Any, prefix: Path_ = ()) -> list[Path_]:
    found = [prefix]
    if isinstance(node, dict):
        for key, child in node.items():
            found += _paths(child, (*prefix, str(key)))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            found += _paths(child, (*prefix, index))
    return found


def _replace(node: Any, path: Path_, make: Any) -> Any:
    """A copy of ``node`` with the value at ``path`` replaced by ``make(old)``."""
    if not path:
        return make(node)
    head, rest = path[0], path[1:]
    if isinstance(node, dict):
        return {k: _replace(v, rest, make) if k == head else v for k, v in node.items()}
    return [_replace(v, rest, make) if i == head else v for i, v in enumerate(node)]


def _drop(node: Any, path: Path_) -> Any:
    if len(path) == 0:
        return node
    parent, last = path[:-1], path[-1]

    def without(container: Any) -> Any:
        if isinstance(container, dict):
            return {k: v for k, v in container.items() if k != last}
        return [v for i, v in enumerate(container) if i != last]

    return _replace(node, parent, without)


@st.composite
def mutated(draw: st.DrawFn) -> Any:
    """A sample with one to three structural mutations."""
    document: Any = draw(st.sampled_from(list(SAMPLES.values())))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = _paths(document)
        path = draw(st.sampled_from(paths))
        kind = draw(
            st.sampled_from(["drop", "type", "text", "nest", "add", "list", "name", "keep"])
        )
        if kind == "drop":
            document = _drop(document, path)
        elif kind == "type":
            value = draw(values)
            document = _replace(document, path, lambda old, v=value: v)
        elif kind == "text":
            value = draw(odd_text)
            document = _replace(document, path, lambda old, v=value: v)
        elif kind == "nest":
            depth = draw(st.integers(min_value=2, max_value=120))
            document = _replace(document, path, lambda old, d=depth: _nested(old, d))
        elif kind == "add" and isinstance(document, dict):
            document = {**document, draw(st.text(max_size=12)): draw(values)}
        elif kind == "list":
            document = _replace(document, path, lambda old: [old, old])
        elif kind == "name" and isinstance(document, dict):
            document = {**document, "name": draw(st.sampled_from(["bot", "other", "Bad Name", ""]))}
    return document


def _nested(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = {"a": value} if depth % 2 else [value]
    return value


def _dump(document: Any, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(document, ensure_ascii=False, allow_nan=True, default=str)
    return yaml.safe_dump(document, allow_unicode=True, sort_keys=False, width=math.inf)


TEMPLATES = [
    # YAML that reaches for code: must be refused, never run.
    "name: bot\nprompt: {system: x}\ndescription: !!python/object/apply:os.system ['exit 3']\n",
    "!!python/object/new:os.system ['exit 3']\n",
    "name: bot\nprompt: {system: x}\ntools: [!!python/name:os.system ]\n",
    # Duplicate keys: the last one wins in YAML; the document must still validate.
    "name: bot\nname: other\nprompt: {system: x}\nprompt: {system: y}\n",
    # Alias bombs, small and large.
    "name: bot\nprompt: {system: x}\noutput:\n  schema: &a {type: object}\n  retries: 2\n"
    "description: *a\n",
    "a: &a [x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c]\n"
    "e: &e [*d, *d, *d, *d, *d, *d, *d, *d]\nf: &f [*e, *e, *e, *e, *e, *e, *e, *e]\n"
    "name: bot\nprompt: {system: x}\ninterceptors: [{name: pii_redaction, config: {m: *f}}]\n",
    "name: bot\nprompt: &p {system: x, variables: {a: *p}}\n",
    # Tool and interceptor names that look like import paths.
    "name: bot\nprompt: {system: x}\ntools: [os.system]\n",
    "name: bot\nprompt: {system: x}\ntools: [{name: 'subprocess:run'}]\n",
    "name: bot\nprompt: {system: x}\ninterceptors: ['dynagent.interceptors.pii:PiiRedaction']\n",
    # Not a mapping at all.
    "- name: bot\n",
    "just text",
    "",
    "~",
]


@st.composite
def hostile_documents(draw: st.DrawFn) -> tuple[str, str]:
    """``(text, fmt)``: a mutated sample or a template, maybe truncated at a random byte."""
    fmt = draw(st.sampled_from(["yaml", "yaml", "json"]))
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        text, fmt = draw(st.sampled_from(TEMPLATES)), "yaml"
    else:
        text = _dump(draw(mutated()), fmt)
    if draw(st.booleans()):
        raw = text.encode()
        cut = draw(st.integers(min_value=0, max_value=len(raw)))
        text = raw[:cut].decode("utf-8", errors="ignore")
    return text, fmt
