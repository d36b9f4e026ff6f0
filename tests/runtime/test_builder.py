"""AgentBuilder: names resolved against registries, ``${VAR}`` from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from dynagent import AgentBuilder, ConfigError, SourceInfo, load_spec
from dynagent.exceptions import FieldIssue
from dynagent.interceptors import ContextEditing, PiiRedaction, ToolCallLimit
from dynagent.models import OpenAIModel
from dynagent.runtime.environment import EnvironmentPolicy
from dynagent.spec._templates import MissingVariable, expand_env

BASE: dict[str, Any] = {"name": "helper", "prompt": {"system": "x"}}
ENDPOINT = {"provider": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}
ANY_NAME = EnvironmentPolicy(allow=("*",))
"""Names are not what these tests are about (tests/security/test_environment_allow.py)."""


def build_error(
    document: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> ConfigError:
    builder = AgentBuilder(environ=environ or {}, environment=ANY_NAME)
    with pytest.raises(ConfigError) as caught:
        builder.build(
            load_spec({**BASE, **document}), source=SourceInfo("file", "agents/helper.yaml")
        )
    return caught.value


def test_an_unknown_tool_names_its_index_and_the_known_tools() -> None:
    error = build_error({"tools": ["calculator", "rm_rf"]})

    assert (error.agent, error.source, error.reason) == (
        "helper",
        "agents/helper.yaml",
        "unknown tool",
    )
    assert error.issues == (
        FieldIssue(
            "tools[rm_rf]", "no tool named 'rm_rf' is registered; known: calculator, current_time"
        ),
    )
    assert str(error).startswith("agent 'helper' agents/helper.yaml: unknown tool (tools[rm_rf]: ")


def test_a_missing_environment_variable_names_the_field_and_the_variable() -> None:
    error = build_error({"model": {**ENDPOINT, "api_key": "${MODEL_KEY}"}})

    assert error.issues == (
        FieldIssue("model.api_key", "environment variable MODEL_KEY is not set"),
    )


def test_a_missing_variable_in_the_fallback_or_a_header_is_named_too() -> None:
    fallback = build_error(
        {"model": {**ENDPOINT, "fallback": {**ENDPOINT, "base_url": "${FB_URL}"}}}
    )
    http = {
        "type": "http",
        "name": "h",
        "url": "https://a.example/",
        "allow_hosts": ["a.example"],
        "headers": {"Authorization": "Bearer ${H_TOKEN}"},
    }
    header = build_error({"tools": [http]})

    assert fallback.issues == (
        FieldIssue("model.fallback.base_url", "environment variable FB_URL is not set"),
    )
    assert header.issues == (
        FieldIssue("tools[h].headers.Authorization", "environment variable H_TOKEN is not set"),
    )


def test_bad_interceptor_settings_name_the_setting() -> None:
    error = build_error({"interceptors": [{"tool_call_limit": {"max": 0}}]})

    assert error.reason == "invalid interceptor settings"
    assert error.issues == (
        FieldIssue(
            "interceptors[tool_call_limit].max", "Input should be greater than or equal to 1"
        ),
    )


def test_an_unknown_interceptor_setting_or_name_is_refused() -> None:
    extra = build_error({"interceptors": ["pii_redaction", {"retry": {"attempts": 3}}]})
    unknown = build_error({"interceptors": ["telepathy"]})

    assert extra.issues == (
        FieldIssue(
            "interceptors[retry].attempts", "unknown field 'attempts' in interceptors[retry]"
        ),
    )
    assert unknown.path == "interceptors[telepathy]"
    assert "no interceptor 'telepathy'" in unknown.issues[0].message


def test_interceptors_are_built_in_order() -> None:
    spec = load_spec(
        {
            **BASE,
            "interceptors": ["pii_redaction", {"tool_call_limit": {"max": 2}}, "context_editing"],
        }
    )

    agent = AgentBuilder(environ={}).build(spec)

    assert [type(i) for i in agent.chain.interceptors] == [
        PiiRedaction,
        ToolCallLimit,
        ContextEditing,
    ]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "http://fallback.local/v1/"),
        ({"MODEL_URL": ""}, "http://fallback.local/v1/"),
        ({"MODEL_URL": "http://set.local/v1"}, "http://set.local/v1/"),
    ],
)
def test_env_defaults_apply_when_the_variable_is_unset_or_empty(
    environ: dict[str, str], expected: str
) -> None:
    model = {
        **ENDPOINT,
        "base_url": "${MODEL_URL:-http://fallback.local/v1}",
        "name": "${MODEL:-gpt-x}",
    }
    spec = load_spec({**BASE, "model": model})

    agent = AgentBuilder(environ=environ, environment=ANY_NAME).build(spec)

    assert isinstance(agent.model, OpenAIModel)
    assert (str(agent.model.client.base_url), agent.model.name) == (expected, "gpt-x")


def test_env_expansion_is_one_pass() -> None:
    environ = {"A": "${B}", "B": "secret"}

    assert expand_env("x-${A}-${C:-d}-${EMPTY:-}", environ) == "x-${B}-d-"
    with pytest.raises(MissingVariable):
        expand_env("${NOPE}", environ)


def test_a_remote_system_prompt_overrides_the_spec() -> None:
    agent = AgentBuilder(environ={}).build(
        load_spec(BASE),
        system_prompt="from nacos",
        revision="r-1",
        source=SourceInfo("nacos", "ns/g/id"),
    )

    assert (agent.system_prompt, agent.revision, agent.source.as_dict()) == (
        "from nacos",
        "r-1",
        {"kind": "nacos", "location": "ns/g/id"},
    )


def test_tool_options_from_the_spec_apply_to_the_registered_tool() -> None:
    spec = load_spec(
        {**BASE, "tools": [{"name": "calculator", "timeout": 1.5, "on_error": "fail"}]}
    )

    tool = AgentBuilder(environ={}).build(spec).tools["calculator"]

    assert (tool.timeout, tool.on_error) == (1.5, "fail")
