"""AgentSpec parsing and validation: every error names the field at fault."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from dynagent import AgentSpec, ConfigError, json_schema, load_spec
from dynagent.exceptions import FieldIssue

REPO = Path(__file__).resolve().parents[2]

MINIMAL: dict[str, Any] = {"name": "helper", "prompt": {"system": "Be brief."}}

FULL = """
name: support-bot
description: Answers order questions.
model:
  provider: openai
  name: gpt-4o-mini
  base_url: ${MODEL_URL:-http://127.0.0.1:8000/v1}
  settings: {temperature: 0.2, max_tokens: 800}
  fallback: {provider: test, name: backup}
prompt:
  system: You work for {{company}}.
  variables: {company: ACME}
tools:
  - calculator
  - {name: current_time, timeout: 5, on_error: fail}
  - type: http
    name: weather
    url: https://api.example.com/weather/{city}
    parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    allow_hosts: [api.example.com]
interceptors:
  - pii_redaction
  - tool_call_limit: {max: 5}
  - {name: context_editing, config: {trigger_tokens: 100}}
output:
  schema: {type: object, properties: {answer: {type: string}}, required: [answer]}
  retries: 1
limits: {max_steps: 4, timeout: 30}
"""


def issues(document: Any) -> tuple[FieldIssue, ...]:
    with pytest.raises(ConfigError) as caught:
        load_spec(document)
    return caught.value.issues


def test_a_full_document_loads_with_every_shorthand() -> None:
    spec = load_spec(FULL)

    assert [ref.model_dump() for ref in spec.interceptors] == [
        {"name": "pii_redaction", "config": {}},
        {"name": "tool_call_limit", "config": {"max": 5}},
        {"name": "context_editing", "config": {"trigger_tokens": 100}},
    ]
    assert spec.output is not None
    assert spec.output.schema_["required"] == ["answer"]
    assert spec.revision == load_spec(FULL).revision
    assert spec.revision != load_spec(FULL.replace("retries: 1", "retries: 2")).revision


TEMPRATURE = (
    "unknown field 'temprature' in model; known fields: api_key, base_url, caller_settings, "
    "circuit_breaker, fallback, max_answer_chars, max_answer_chunks, name, provider, retries, "
    "settings, structured_output, timeout"
)


def test_an_unknown_field_is_named_with_the_field_it_likely_meant() -> None:
    document = {
        **MINIMAL,
        "model": {"name": "m", "settings": {"max_tokns": 5}},
        "tools": ["calculator", {"name": "search", "timeot": 3}, {"type": "http"}],
    }

    assert issues(document) == (
        FieldIssue(
            "model.settings.max_tokns",
            "unknown field 'max_tokns' in model.settings; did you mean 'max_tokens'?",
        ),
        FieldIssue(
            "tools[search].timeot",
            "unknown field 'timeot' in tools[search]; did you mean 'timeout'?",
        ),
        FieldIssue("tools[#3].name", "Field required"),
        FieldIssue("tools[#3].url", "Field required"),
        FieldIssue("tools[#3].allow_hosts", "Field required"),
    )


def test_an_unknown_field_is_named() -> None:
    document = {**MINIMAL, "model": {"name": "m", "temprature": 0.2}}

    assert issues(document) == (FieldIssue("model.temprature", TEMPRATURE),)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"name": "Not A Name"}, "name"),
        ({"limits": {"max_steps": 0}}, "limits.max_steps"),
        ({"model": {"timeout": -1}}, "model.timeout"),
        ({"tools": [{"name": "x", "on_error": "ignore"}]}, "tools[x].on_error"),
        ({"tools": [{"type": "http", "name": "h", "url": "ftp://x"}]}, "tools[h].url"),
        ({"tools": ["calculator", "calculator"]}, ""),
        ({"prompt": {}}, "prompt"),
    ],
)
def test_invalid_fields_are_named(change: dict[str, Any], path: str) -> None:
    found = issues({**MINIMAL, **change})

    assert found[0].path == path


def test_an_invalid_output_schema_is_refused() -> None:
    found = issues({**MINIMAL, "output": {"schema": {"type": "banana"}}})

    assert [issue.path for issue in found] == ["output.schema"]
    assert "not a valid JSON Schema" in found[0].message


def test_an_invalid_http_tool_schema_is_refused() -> None:
    tool = {
        "type": "http",
        "name": "h",
        "url": "https://a.example/",
        "allow_hosts": ["a.example"],
        "parameters": {"type": "object", "required": "city"},
    }

    assert [issue.path for issue in issues({**MINIMAL, "tools": [tool]})] == ["tools[h].parameters"]


@pytest.mark.parametrize(
    "text",
    [
        "!!python/object/apply:os.system ['echo pwned']",
        "name: !!python/object:builtins.dict {}\nprompt: {system: x}",
        "name: !!python/name:os.system\nprompt: {system: x}",
    ],
)
def test_yaml_object_tags_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_spec(text)


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be a mapping of fields"):
        load_spec("- just\n- a list\n")


def test_json_documents_load_too() -> None:
    assert load_spec('{"name": "j", "prompt": {"system": "x"}}', fmt="json").name == "j"
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_spec("{name: j}", fmt="json")


def exported_schema_errors(document: Any) -> list[str]:
    validator = jsonschema.Draft202012Validator(json_schema())
    return ["/".join(map(str, error.absolute_path)) for error in validator.iter_errors(document)]


def test_the_exported_json_schema_is_valid_and_accepts_a_full_document() -> None:
    jsonschema.Draft202012Validator.check_schema(json_schema())

    assert exported_schema_errors(yaml.safe_load(FULL)) == []
    assert exported_schema_errors(MINIMAL) == []


@pytest.mark.parametrize(
    "sample",
    sorted(
        p for p in (REPO / "config-samples" / "agents").glob("*.yaml") if ".evals." not in p.name
    ),
    ids=lambda p: p.name,
)
def test_the_exported_json_schema_accepts_the_shipped_samples(sample: Path) -> None:
    document = yaml.safe_load(sample.read_text())
    if sample.name.endswith(".canary.yaml"):  # a spec plus its rollout block
        assert isinstance(document.pop("rollout"), dict)

    assert isinstance(load_spec(document), AgentSpec)
    assert exported_schema_errors(document) == []


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"modle": {}}, ""),
        ({"limits": {"max_steps": "many"}}, "limits/max_steps"),
        ({"interceptors": [{"a": {}, "b": {}}]}, "interceptors/0"),
        ({"tools": [{"type": "http", "name": "h", "url": "https://x"}]}, "tools/0"),
    ],
)
def test_the_exported_json_schema_refuses_what_load_spec_refuses(
    change: dict[str, Any], where: str
) -> None:
    document = {**MINIMAL, **change}

    with pytest.raises(ConfigError):
        load_spec(document)
    assert where in exported_schema_errors(document)
