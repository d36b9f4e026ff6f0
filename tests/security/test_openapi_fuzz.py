"""Schemathesis over the whole OpenAPI document, against a real aiohttp server on loopback.

Every operation of ``/openapi.json`` gets schema-valid and schema-violating requests
(bodies, path parameters, headers); each answer must be no 5xx, come within the
timeout, show no stack trace, and conform to the document where it says so
(status codes, content types, headers, JSON Schemas). Schemathesis' pytest
integration (``from_fixture``) does not run on pytest 9.2 (it sets
``node._nodeid``), so each operation drives ``operation.as_strategy()`` here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
import requests
import schemathesis
from a2a.types import A2ARequest, SendMessageRequest, SendStreamingMessageRequest
from hypothesis import HealthCheck, given, settings
from schemathesis import Case, GenerationMode
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from schemathesis.specs.openapi.schemas import OpenApiSchema

from dynagent.http.app import create_app
from dynagent.http.openapi import openapi_document
from dynagent.spec.agent import NAME_PATTERN
from tests.support.budget import budget
from tests.support.service import agent_document, service_config, write_agent
from tests.support.threaded import ServedApp, served_in_thread

USER_KEY = "fuzz-user-key-aaaaaaaaaaaaaaaa"
"""Limited to ``bot``; no admin."""
ADMIN_KEY = "fuzz-admin-key-bbbbbbbbbbbbbbbb"
AGENTS = ("bot", "triage", "ghost")
TIMEOUT = 15.0
STACK_TRACE = re.compile(r"Traceback \(most recent call last\)|File \"[^\"]+\", line \d+")
STREAMS = {("GET", "/v1/watch/agents")}
"""Streams that stay open for minutes by design (the page's live feed): tested on their own."""
OPERATIONS = [
    (method.upper(), path)
    for path, item in openapi_document()["paths"].items()
    for method in item
    if (method.upper(), path) not in STREAMS
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedApp]:
    base = tmp_path_factory.mktemp("fuzz")
    agents, state = base / "agents", base / "state"
    agents.mkdir()
    state.mkdir()
    write_agent(agents, agent_document("bot"))
    schema = {"type": "object", "properties": {"category": {"type": "string"}}}
    write_agent(agents, agent_document("triage", output={"schema": schema}))
    canary = {**agent_document("bot", description="candidate"), "rollout": {"weight": 50}}
    write_agent(agents, canary, filename="bot.canary.yaml")
    keys = tmp_path_factory.mktemp("keys") / "keys.yaml"
    keys.write_text(f"keys: [{{name: user, key: {USER_KEY}, agents: [bot]}}]\n")
    config = service_config(
        agents, state, listen={"max_body_bytes": 65_536}, auth={"keys_file": str(keys)}
    )
    environ = {"DYNAGENT_ADMIN_KEYS": ADMIN_KEY}
    with served_in_thread(lambda: create_app(config, environ=environ)) as running:
        yield running


@pytest.fixture(scope="module")
def tally() -> Iterator[Counter[str]]:
    """Requests made per operation, for the summary line once the module's runs are done."""
    sent: Counter[str] = Counter()
    yield sent
    if sent:
        print(f"\nschemathesis: {sent.total()} requests over {len(sent)} operations")


@pytest.fixture(scope="module")
def api(served: ServedApp) -> OpenApiSchema:
    """The document as the server serves it, with auth sent by the test (not generated)."""
    schema = schemathesis.openapi.from_url(f"{served.url}/openapi.json")
    schema.config.generation.update(with_security_parameters=False, allow_x00=True)
    # Refusing a negative case for its size, method, media type or a stalled body is a
    # refusal too (Schemathesis' default list stops at 400/401/403/404/406/422/428).
    rejection = schema.config.checks.negative_data_rejection
    rejection.expected_statuses = [*rejection.expected_statuses, "405", "408", "413", "415"]

    @schema.hook
    def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
        # Mostly real agents, so requests get past the 404; a name that breaks the
        # pattern (a negative case) stays as generated.
        if not path_parameters or not re.match(NAME_PATTERN, str(path_parameters.get("name"))):
            return st.just(path_parameters)
        names = st.sampled_from([*AGENTS, path_parameters["name"]])
        return names.map(lambda name: {**path_parameters, "name": name})

    return schema


@schemathesis.check
def no_stack_trace(ctx: Any, response: Any, case: Case[Any]) -> bool | None:
    text = response.text or ""
    assert not STACK_TRACE.search(text), f"the answer shows a stack trace: {text[:300]}"
    return None


CROSS_FIELD_REFUSALS = re.compile(
    r"tools listed twice|tool_choice names|has its own output schema|not a valid JSON Schema"
    r"|metadata\.variables must be|^input\[\d+\]|clash with tools of agent"
    r"|does not accept client tools|^(messages\[\d+\]|input): |which is not valid Unicode$"
)
"""What the run routes may refuse in a schema-valid body: constraints between fields,
between messages (a tool result must answer a call before it), or against the agent's
definition, that a JSON Schema cannot carry (OpenAI's own API refuses them with a 400 too),
and text that is not Unicode (a JSON Schema string admits an unpaired surrogate)."""
RUN_ROUTES = {
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/responses"),
    ("POST", "/v1/agents/{name}/invoke"),
}


def valid_bodies_are_refused_only_across_fields(
    ctx: Any, response: Any, case: Case[Any]
) -> bool | None:
    """``positive_data_acceptance`` for the OpenAI run routes, less the refusals above."""
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return None
    if response.status_code == 400:
        message = response.json()["error"]["message"]
        assert CROSS_FIELD_REFUSALS.search(message), f"a schema-valid body refused: {message}"
    return None


EVAL_RUN = ("POST", "/v1/agents/{name}/evals")
DOCUMENT_REFUSALS = re.compile(
    r"the request's (spec|suite)|the draft spec defines agent|the suite has no case"
)
"""What an evaluation run may refuse in a schema-valid body: the draft agent document and
the suite it carries are validated as documents (their own schemas, names, references),
and the cases it names must be the suite's."""


def valid_bodies_are_refused_only_as_documents(
    ctx: Any, response: Any, case: Case[Any]
) -> bool | None:
    """``positive_data_acceptance`` for an evaluation run, less the refusals above."""
    if case.meta is None or case.meta.generation.mode != GenerationMode.POSITIVE:
        return None
    if response.status_code == 400:
        message = response.json()["error"]["message"]
        assert DOCUMENT_REFUSALS.search(message), f"a schema-valid body refused: {message}"
    return None


A2A_RPC = ("POST", "/a2a/{name}")


def json_rpc_refuses_in_band(ctx: Any, response: Any, case: Case[Any]) -> bool | None:
    """A2A's JSON-RPC answers a request it cannot take with HTTP 200 and a JSON-RPC error
    (``negative_data_rejection`` expects a 4xx): a success answers only a body that
    ``a2a-sdk`` reads as ``message/send`` or ``message/stream``."""
    if response.status_code != 200 or "json" not in response.headers.get("Content-Type", ""):
        return None
    if "result" in response.json():
        request = A2ARequest.model_validate(case.body).root
        assert isinstance(request, SendMessageRequest | SendStreamingMessageRequest), case.body
    return None


def _checks(method: str, path: str) -> tuple[list[Any] | None, list[Any] | None]:
    """(excluded, additional) checks of an operation, where the defaults do not fit."""
    if (method, path) in RUN_ROUTES:
        return [positive_data_acceptance], [valid_bodies_are_refused_only_across_fields]
    if (method, path) == A2A_RPC:
        return [negative_data_rejection], [json_rpc_refuses_in_band]
    if (method, path) == EVAL_RUN:
        return [positive_data_acceptance], [valid_bodies_are_refused_only_as_documents]
    return None, None


@pytest.mark.fuzz
@pytest.mark.parametrize("method,path", OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_operation_answers_hostile_requests_within_its_contract(
    api: OpenApiSchema,
    tally: Counter[str],
    request: pytest.FixtureRequest,
    method: str,
    path: str,
) -> None:
    operation = api[path][method]
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    cases = st.one_of(*(operation.as_strategy(generation_mode=mode) for mode in modes))
    keys = st.sampled_from([ADMIN_KEY, ADMIN_KEY, USER_KEY])
    session = requests.Session()
    statuses: list[int] = []

    @settings(
        max_examples=budget(request.config, default=40, long=1000),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases, key=keys)
    def run(case: Case[Any], key: str) -> None:
        excluded, additional = _checks(method, path)
        response = case.call_and_validate(
            session=session,
            headers={"Authorization": f"Bearer {key}"},
            timeout=TIMEOUT,
            excluded_checks=excluded,
            additional_checks=additional,
        )
        statuses.append(response.status_code)

    run()
    tally[f"{method} {path}"] += len(statuses)
    assert statuses
    assert [status for status in statuses if status >= 500] == []


def test_the_runs_cover_every_operation_the_service_documents(served: ServedApp) -> None:
    """The operations above come from the routes' document (``openapi_document()``): the
    document the running service serves has exactly these, and the streams left out."""
    document = requests.get(f"{served.url}/openapi.json", timeout=TIMEOUT).json()
    operations = {(m.upper(), p) for p, item in document["paths"].items() for m in item}
    assert operations == {*OPERATIONS, *STREAMS}
