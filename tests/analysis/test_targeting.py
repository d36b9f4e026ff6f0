"""``rollout.match``: a CEL expression over the request decides which callers may reach
a canary, before its weight applies."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dynagent import Agent, AgentBuilder, ConfigError, load_spec
from dynagent.registry.canary import RolloutPolicy, load_canary
from dynagent.registry.facade import AgentRegistry
from dynagent.registry.targeting import MatchError, compile_match
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import RunningService, agent_document, running_service, service_config

STAFF_OR_ACME = 'caller == "staff" || headers["x-tenant"] == "acme"'
BUILDER = AgentBuilder()


def _agent(system: str) -> Agent:
    spec = load_spec({"name": "bot", "model": {"provider": "test"}, "prompt": {"system": system}})
    return BUILDER.build(spec)


def _registry(match: str, weight: float = 100) -> AgentRegistry:
    registry = AgentRegistry()
    registry.table.put(_agent("Stable."))
    registry.rollouts.put_canary(_agent("Canary."), RolloutPolicy(weight=weight, match=match))
    return registry


names = st.text(alphabet=st.characters(codec="ascii", categories=("L", "N")), max_size=12)
headers = st.dictionaries(
    st.sampled_from(["x-tenant", "x-team", "accept", "user-agent"]), names, max_size=4
)


@settings(max_examples=300, deadline=None)
@given(caller=names, request_headers=headers)
def test_callers_the_expression_rejects_never_reach_the_canary(
    caller: str, request_headers: dict[str, str]
) -> None:
    registry = _registry(STAFF_OR_ACME)
    attributes = {"caller": caller, "headers": request_headers}

    _, variant = registry.route("bot", key=caller, attributes=attributes)

    admitted = caller == "staff" or request_headers.get("x-tenant") == "acme"
    assert variant == ("canary" if admitted else "stable")


def test_the_weight_applies_among_the_callers_the_expression_admits() -> None:
    registry = _registry('caller.startsWith("staff-")', weight=50)
    staff = [
        registry.route("bot", key=f"staff-{i}", attributes={"caller": f"staff-{i}"})[1]
        for i in range(400)
    ]
    others = [
        registry.route("bot", key=f"user-{i}", attributes={"caller": f"user-{i}"})[1]
        for i in range(400)
    ]

    assert 0.4 < staff.count("canary") / 400 < 0.6
    assert others.count("canary") == 0


def test_a_failing_or_non_boolean_expression_admits_no_one_and_is_counted() -> None:
    missing = compile_match('headers["x-tenant"] == "acme"')
    text = compile_match("caller")

    assert not missing.eligible({"headers": {}})
    assert missing.errors == 1
    assert not text.eligible({"caller": "staff"})


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ('caller == "staff" ||', "Syntax error"),
        ('tenant == "acme"', "unknown name 'tenant'"),
        ("x" * 2001, "at most 2000 characters"),
        (
            " && ".join(f"headers.exists(k{i}, true)" for i in range(5)),
            "more than 4 comprehensions",
        ),
    ],
)
def test_an_invalid_expression_is_a_build_error_naming_the_field(source: str, said: str) -> None:
    document = {**agent_document("bot"), "rollout": {"weight": 10, "match": source}}

    with pytest.raises(ConfigError) as caught:
        load_canary(document)

    (issue,) = caught.value.issues
    assert issue.path == "rollout.match"
    assert said in issue.message


def test_only_the_header_names_an_expression_reads_are_passed_to_it() -> None:
    literal = compile_match('"x-tenant" in headers && headers["x-tenant"] == "acme"')
    whole = compile_match('headers.exists(h, h.startsWith("x-"))')
    raw = compile_match('headers[r"x-tenant"] == "acme"')

    assert literal.keys == {"headers": frozenset({"x-tenant"})}
    assert whole.keys == {"headers": None}
    assert raw.keys == {"headers": None}
    assert whole.eligible({"headers": {"X-Team": "a"}})  # names lower-cased
    with pytest.raises(MatchError):
        compile_match(
            "headers.all(a, headers.all(b, headers.all(c, headers.all(d, headers.all(e, true)))))"
        )


KEYS = {"staff": "sk-staff-0123456789", "customer": "sk-customer-0123456789"}


@pytest.fixture
async def service(
    agents_dir: Path, state_dir: Path, tmp_path: Path
) -> AsyncIterator[RunningService]:
    keys = tmp_path / "keys.yaml"
    entries = [{"name": name, "key": key} for name, key in KEYS.items()]
    keys.write_text(yaml.safe_dump({"keys": entries}), encoding="utf-8")
    config = service_config(agents_dir, state_dir, auth={"keys_file": str(keys)})
    async with running_service(config, environ={}) as running:
        yield running


async def test_over_http_only_matching_callers_get_the_canary(service: RunningService) -> None:
    stable = agent_document("bot", system="Stable.")
    candidate = agent_document("bot", system="Canary.")
    service.write_agent(stable)
    rollout: dict[str, Any] = {"match": STAFF_OR_ACME}
    service.write_agent(canary_document(candidate, 100, **rollout), filename=canary_filename("bot"))
    revision = canary_revision(candidate)
    await service.registry.wait_for(
        lambda r: (
            "bot" in r and (c := r.entry("bot").canary) is not None and c.agent.revision == revision
        )
    )

    async def variant(who: str, **extra: str) -> str | None:
        headers = {"Authorization": f"Bearer {KEYS[who]}", **extra}
        for path, body in (
            ("/v1/agents/bot/invoke", {"input": "hi"}),
            (
                "/v1/chat/completions",
                {"model": "bot", "messages": [{"role": "user", "content": "hi"}]},
            ),
        ):
            response = await service.client.post(path, json=body, headers=headers)
            assert response.status == 200, await response.text()
            seen = response.headers.get("X-Agent-Variant")
        return seen

    assert await variant("staff") == "canary"
    assert await variant("customer") == "stable"
    assert await variant("customer", **{"X-Tenant": "acme"}) == "canary"
    assert await variant("customer", **{"X-Tenant": "other"}) == "stable"
