"""Agent documents written to hurt: bombs, deep nesting, bad Unicode, code references.

Each is refused with a message that says why, quickly, and the revision that
served before keeps serving with the refusal in its status.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dynagent import AgentBuilder, load_spec
from dynagent.exceptions import ConfigError
from dynagent.factories.base import DocumentApplier
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec

GOOD = "name: bot\nmodel: {provider: test}\nprompt: {system: You help.}\n"
HEAD = "name: bot\nmodel: {provider: test}\nprompt: {system: You help.}\n"


def laughs(levels: int = 9, width: int = 9) -> str:
    """The "billion laughs": each anchor is a list of ``width`` aliases of the one before."""
    lines = ["output:", "  schema:", "    type: object", "    l0: &l0 [lol, lol, lol]"]
    for level in range(1, levels + 1):
        lines.append(f"    l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * width)}]")
    return HEAD + "\n".join(lines) + "\n"


def merge_bomb(levels: int = 9) -> str:
    """Merge keys copy the merged pairs while PyYAML loads: exponential before any check."""
    lines = ["interceptors:", "  - name: pii_redaction", "    config:"]
    lines.append("      m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(9)) + "}")
    for level in range(1, levels + 1):
        merged = ", ".join([f"*m{level - 1}"] * 9)
        lines.append(f"      m{level}: &m{level} {{<<: [{merged}]}}")
    return HEAD + "\n".join(lines) + "\n"


def deep_json(levels: int) -> str:
    return json.dumps({"name": "bot", "prompt": {"system": "x"}})[:-1] + (
        ', "description": ' + "[" * levels + "]" * levels + "}"
    )


REFUSED = {
    "billion laughs": (laughs(), "yaml", "document refused: the document holds more than 100000"),
    "merge-key bomb": (merge_bomb(), "yaml", "document refused: the document holds more than"),
    "recursive alias": (
        HEAD + "interceptors: [{name: pii_redaction, config: &c {a: *c}}]\n",
        "yaml",
        "document refused: the document nests deeper than 64 levels",
    ),
    "deep YAML": (
        HEAD + "description: " + "[" * 400_000 + "]" * 400_000 + "\n",
        "yaml",
        r"document refused: the document nests deeper than 64 levels"
        r"|not valid YAML: the document nests deeper than 64 levels",
    ),
    "deep JSON": (deep_json(100_000), "json", "document refused: the document nests deeper"),
    "JSON just past the nesting limit": (deep_json(70), "json", "document refused: the document"),
    "lone surrogate in JSON": (
        '{"name": "bot", "prompt": {"system": "\\ud800"}}',
        "json",
        r"document refused: text holds '\\ud800', which is not valid Unicode",
    ),
    "lone surrogate in YAML": (
        'name: bot\nprompt: {system: "hi \\udfff"}\n',
        "yaml",
        r"document refused: text holds '\\udfff', which is not valid Unicode"
        r"|not valid YAML: .*found invalid Unicode character escape code",
    ),
    "over a megabyte": (
        HEAD + "description: " + "x" * 1_000_001 + "\n",
        "yaml",
        r"document refused: the document is longer than 1000000 characters",
    ),
}


def aliased_scalar(chars: int, aliases: int, *, as_values: bool = False) -> str:
    """One long scalar, anchored once and aliased many times: few values, many characters
    (in an output schema, where any JSON goes)."""
    uses = (
        "{" + ", ".join(f"k{i}: *big" for i in range(aliases)) + "}"
        if as_values
        else "[" + ", ".join(["*big"] * aliases) + "]"
    )
    return HEAD + f"output: {{schema: {{description: &big {'x' * chars}, examples: [{uses}]}}}}\n"


def aliased_list_of_scalars(chars: int, width: int, aliases: int) -> str:
    """A list of long scalars anchored once, the list aliased: characters grow as a product."""
    big = "[" + ", ".join(["y" * chars] * width) + "]"
    copies = ", ".join(["*big"] * aliases)
    return HEAD + f"output: {{schema: {{examples: [&big {big}, {copies}]}}}}\n"


EXPANDED = "document refused: the document holds more than 2000000 characters once"
REFUSED |= {
    "a 450,000-character scalar aliased 2,000 times": (
        aliased_scalar(450_000, 2_000),
        "yaml",
        EXPANDED,
    ),
    "a 100,000-character scalar aliased 20,000 times": (
        aliased_scalar(100_000, 20_000),
        "yaml",
        EXPANDED,
    ),
    "a scalar aliased as mapping values": (
        aliased_scalar(50_000, 50, as_values=True),
        "yaml",
        EXPANDED,
    ),
    "a list of long scalars aliased": (aliased_list_of_scalars(10_000, 30, 8), "yaml", EXPANDED),
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text,fmt,message", REFUSED.values(), ids=list(REFUSED))
def test_documents_past_the_bounds_are_refused_at_once(text: str, fmt: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_spec(text, fmt=fmt)  # type: ignore[arg-type]
    assert re.match(message, str(refused.value)), str(refused.value)


def test_ordinary_anchors_and_nesting_still_load() -> None:
    nested: dict[str, object] = {"type": "string"}
    for _ in range(20):
        nested = {"type": "object", "properties": {"a": nested}}
    text = (
        "name: bot\n"
        "model: {provider: test}\n"
        "prompt: {system: &s You help., variables: {greeting: *s}}\n"
        f"output: {{schema: {json.dumps(nested)}}}\n"
    )
    spec = load_spec(text)
    assert spec.prompt.variables == {"greeting": "You help."}
    assert load_spec(laughs(levels=2, width=3)).output is not None
    # A long text shared a few times stays well inside the expanded bound.
    shared = load_spec(aliased_scalar(100_000, 5)).output
    assert shared is not None and shared.schema_["examples"] == [["x" * 100_000] * 5]


CODE_TAGS = [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
    "!!python/name:os.system",
    "!!python/module:os",
]


@pytest.mark.parametrize("tag", CODE_TAGS)
def test_yaml_tags_that_name_python_never_run(tag: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = HEAD + f"description: {tag.format(marker=marker)}\n"
    with pytest.raises(
        ConfigError, match=r"^not valid YAML: line 4, column 14: could not determine a constructor"
    ):
        load_spec(text)
    assert not marker.exists()


IMPORT_PATHS = ["os.system", "subprocess:run", "builtins.eval", "os/system", "__import__('os')"]


@pytest.mark.parametrize("name", IMPORT_PATHS)
def test_tools_and_interceptors_cannot_name_code(name: str) -> None:
    for field, entry in (
        ("tools[#1]", name),
        ("tools[#1].name", {"name": name}),
        ("interceptors[#1].name", name),
        ("interceptors[#1].name", {name: {}}),
    ):
        document: dict[str, Any] = {
            "name": "bot",
            "prompt": {"system": "x"},
            field.split("[")[0]: [entry],
        }
        with pytest.raises(ConfigError) as refused:
            load_spec(document)
        assert [issue.path for issue in refused.value.issues] == [field], entry
        assert "String should match pattern" in refused.value.issues[0].message


async def test_the_serving_revision_survives_every_hostile_document() -> None:
    registry = AgentRegistry()
    builder = AgentBuilder(environ={})

    def build(spec: AgentSpec, document: Document) -> Agent:
        return builder.build(spec, source=document.info)

    applier = DocumentApplier(registry, build)
    info = SourceInfo("file", "/agents/bot.yaml")
    await applier.apply(Document("bot.yaml", GOOD, "yaml", info))
    serving = registry.get("bot")
    for text, fmt, message in REFUSED.values():
        await applier.apply(Document("bot.yaml", text, fmt, info))  # type: ignore[arg-type]
        status = registry.status("bot")
        assert registry.get("bot") is serving
        assert (status["state"], status["revision"]) == ("serving", serving.revision)
        assert status["last_error"]["source"] == "/agents/bot.yaml"
        assert re.match(
            f"agent 'bot' /agents/bot.yaml: ({message})", status["last_error"]["message"]
        )
    await applier.apply(Document("bot.yaml", GOOD, "yaml", info))
    assert registry.status("bot")["last_error"] is None


async def test_a_broken_edit_that_also_renames_is_refused_on_the_agent_it_serves() -> None:
    registry = AgentRegistry()
    builder = AgentBuilder(environ={})

    def build(spec: AgentSpec, document: Document) -> Agent:
        return builder.build(spec, source=document.info)

    applier = DocumentApplier(registry, build)
    info = SourceInfo("file", "/agents/bot.yaml")
    await applier.apply(Document("bot.yaml", GOOD, "yaml", info))
    broken = GOOD.replace("name: bot", "name: helper") + "rollout: {weight: 5}\n"
    await applier.apply(Document("bot.yaml", broken, "yaml", info))
    assert [(e.name, e.stable is not None) for e in registry] == [("bot", True)]
    assert registry.status("bot")["last_error"]["message"] == (
        "agent 'bot' /agents/bot.yaml: invalid agent definition "
        "(rollout: unknown field 'rollout'; known fields: client_tools, description, "
        "interceptors, limits, model, name, output, parallel_tool_calls, prompt, tools)"
    )
