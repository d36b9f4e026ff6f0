"""Canaries over HTTP: sticky routing by weight, replicas that agree, pins through our API and
the OpenAI one, what every answer and trace says about its variant, and a canary's life
through its ``{name}.canary.yaml`` file."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import ClientResponse

from dynagent.registry.canary import picks_canary
from tests.support.canary import canary_document, canary_filename, canary_revision
from tests.support.service import (
    RunningService,
    agent_document,
    revision_of,
    running_service,
    service_config,
    write_agent,
)

STABLE = agent_document("bot", system="Stable.")
CANARY = canary_document(agent_document("bot", system="Canary."), weight=20)
REVISIONS = {"stable": revision_of(STABLE), "canary": canary_revision(CANARY)}
API_KEY = "canary-test-key-000001"


def memory_config(agents_dir: Path, state_dir: Path, **sections: Any) -> Any:
    return service_config(agents_dir, state_dir, sessions={"store": "memory"}, **sections)


@pytest.fixture
async def service(agents_dir: Path, state_dir: Path) -> AsyncIterator[RunningService]:
    """``bot`` on the offline model, with a canary at 20% beside its stable version."""
    write_agent(agents_dir, STABLE)
    write_agent(agents_dir, CANARY, filename=canary_filename("bot"))
    async with running_service(memory_config(agents_dir, state_dir)) as running:
        assert running.registry.status("bot")["canary"]["revision"] == REVISIONS["canary"]
        yield running


def random_keys(seed: int, count: int) -> list[str]:
    """Random-looking keys, the same on every run so the measured share is reproducible."""
    rng = random.Random(seed)
    return [f"{rng.getrandbits(64):016x}" for _ in range(count)]


async def answered(response: ClientResponse) -> str:
    """The variant that answered, checked to agree between body, headers and revision."""
    body = await response.json()
    assert response.status == 200, body
    variant = body["variant"]
    assert (response.headers["X-Agent-Variant"], response.headers["X-Agent-Revision"]) == (
        variant,
        body["revision"],
    )
    assert body["revision"] == REVISIONS[variant]
    return str(variant)


async def invoke_all(
    service: RunningService, requests: list[dict[str, Any]], concurrency: int = 32
) -> list[str]:
    """Invoke ``bot`` with each ``{"json": …, "headers": …}``; the variants, in order."""
    limit = asyncio.Semaphore(concurrency)

    async def one(request: dict[str, Any]) -> str:
        async with limit:
            response = await service.client.post("/v1/agents/bot/invoke", **request)
            return await answered(response)

    return list(await asyncio.gather(*(one(r) for r in requests)))


def by_header(key: str) -> dict[str, Any]:
    return {"json": {"input": "hi"}, "headers": {"X-Canary-Key": key}}


def by_session(key: str) -> dict[str, Any]:
    return {"json": {"input": "hi", "session_id": key}}


async def test_a_weight_of_20_sends_a_fifth_of_the_keys_to_the_canary_and_keeps_them_there(
    service: RunningService,
) -> None:
    header_keys, session_keys = random_keys(1, 1000), random_keys(2, 1000)
    requests = [by_header(k) for k in header_keys] + [by_session(k) for k in session_keys]
    variants = await invoke_all(service, requests)

    share = 100 * variants.count("canary") / len(variants)
    print(f"canary share over {len(variants)} keyed requests: {share:.2f}%")
    assert 17 <= share <= 23
    expected = [picks_canary("bot", k, 20) for k in header_keys + session_keys]
    assert [v == "canary" for v in variants] == expected
    # The same keys again, in another order: every caller lands where it landed before.
    again = await invoke_all(service, requests[::-1])
    assert again[::-1] == variants


async def test_two_replicas_route_every_key_the_same_way(
    service: RunningService, agents_dir: Path, tmp_path: Path
) -> None:
    keys = random_keys(3, 300)
    (tmp_path / "replica").mkdir()
    async with running_service(memory_config(agents_dir, tmp_path / "replica")) as replica:
        assert replica.registry is not service.registry
        first = await invoke_all(service, [by_header(k) for k in keys])
        second = await invoke_all(replica, [by_header(k) for k in keys])
    assert first == second
    assert set(first) == {"stable", "canary"}


async def test_without_a_key_each_request_is_drawn_by_weight(
    service: RunningService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("dynagent.registry.canary.random", random.Random(4))
    variants = await invoke_all(service, [{"json": {"input": "hi"}}] * 2000)
    assert 17 <= 100 * variants.count("canary") / 2000 <= 23


async def test_an_api_key_keeps_its_caller_on_one_variant(
    agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, STABLE)
    write_agent(agents_dir, canary_document(CANARY, weight=50), filename=canary_filename("bot"))
    keys = [f"{API_KEY}-{i}" for i in range(8)]
    environ = {"DYNAGENT_API_KEYS": ",".join(keys)}
    async with running_service(memory_config(agents_dir, state_dir), environ=environ) as service:
        per_key = []
        for key in keys:
            auth = {"Authorization": f"Bearer {key}"}
            request = {"json": {"input": "hi"}, "headers": auth}
            per_key.append(set(await invoke_all(service, [request] * 20)))
    assert all(len(variants) == 1 for variants in per_key)
    assert set().union(*per_key) == {"stable", "canary"}


@pytest.mark.parametrize(
    "sticky_key,sticky,random_",
    [("header", by_header, by_session), ("session", by_session, by_header)],
)
async def test_the_sticky_key_names_what_keeps_a_caller(
    sticky_key: str, sticky: Any, random_: Any, agents_dir: Path, state_dir: Path
) -> None:
    write_agent(agents_dir, STABLE)
    canary = canary_document(CANARY, weight=50, sticky_key=sticky_key)
    write_agent(agents_dir, canary, filename=canary_filename("bot"))
    async with running_service(memory_config(agents_dir, state_dir)) as service:
        kept = await invoke_all(service, [sticky("one-caller")] * 40)
        drawn = await invoke_all(service, [random_("one-caller")] * 40)
    assert (len(set(kept)), set(drawn)) == (1, {"stable", "canary"})


async def test_a_pinned_variant_answers_whatever_the_key(service: RunningService) -> None:
    for variant in ("stable", "canary"):
        pinned = [
            {**by_header(k), "headers": {"X-Canary-Key": k, "X-Agent-Variant": variant}}
            for k in random_keys(5, 50)
        ]
        assert set(await invoke_all(service, pinned)) == {variant}
    response = await service.client.post(
        "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Agent-Variant": "beta"}
    )
    assert (response.status, await response.json()) == (
        400,
        {
            "error": {
                "type": "bad_request",
                "message": "X-Agent-Variant must be 'stable' or 'canary'",
            }
        },
    )


async def completion_of(
    client: openai.AsyncOpenAI, model: str, stream: bool
) -> tuple[str, str | None, Mapping[str, str]]:
    """``(model, text, headers)`` of one chat completion, streamed or not."""
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    if stream:
        raw_stream = await client.chat.completions.with_raw_response.create(
            model=model, messages=messages, stream=True
        )
        chunks = [c async for c in raw_stream.parse()]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return chunks[0].model, text, raw_stream.headers
    raw = await client.chat.completions.with_raw_response.create(model=model, messages=messages)
    completion = raw.parse()
    return completion.model, completion.choices[0].message.content, raw.headers


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_model_names_pin_a_variant_and_traces_record_it(
    service: RunningService, stream: bool
) -> None:
    async with openai.AsyncOpenAI(
        base_url=f"{service.url}/v1", api_key="unused", max_retries=0
    ) as client:
        for variant in ("stable", "canary", "stable", "canary"):
            model, text, headers = await completion_of(client, f"bot@{variant}", stream)
            echoed = f"[test model] you said: hi | prompt: {variant.title()}."
            assert (model, (text or "").strip()) == (f"bot@{variant}", echoed)
            assert (headers["X-Agent-Variant"], headers["X-Agent-Revision"]) == (
                variant,
                REVISIONS[variant],
            )
            trace = await (await service.client.get(f"/v1/traces/{headers['X-Trace-Id']}")).json()
            assert {k: trace[k] for k in ("agent", "revision", "variant", "factory")} == {
                "agent": "bot",
                "revision": REVISIONS[variant],
                "variant": variant,
                "factory": "default",
            }
            assert [e["type"] for e in trace["events"] if e["type"] != "model_delta"] == [
                "run_started",
                "model_request",
                "model_response",
                "final_output",
                "run_finished",
            ]


async def test_a_canary_lives_and_ends_with_its_file(agents_dir: Path, state_dir: Path) -> None:
    path = write_agent(agents_dir, STABLE).resolve()
    canary_path = (agents_dir / canary_filename("bot")).resolve()
    first = canary_document(agent_document("bot", system="First try."), weight=10)
    second = canary_document(agent_document("bot", system="Second try."), weight=30)
    async with running_service(memory_config(agents_dir, state_dir)) as service:
        assert service.registry.status("bot")["canary"] is None

        service.write_agent(first, filename=canary_filename("bot"))
        await wait_canary(service, canary_revision(first))
        status = await (await service.client.get("/v1/agents/bot")).json()
        canary = status["canary"]
        assert isinstance(canary.pop("loaded_at"), float)
        assert canary == {
            "revision": canary_revision(first),
            "weight": 10.0,
            "sticky_key": "auto",
            "state": "serving",
            "pulled": None,
            "source": {"kind": "file", "location": str(canary_path)},
            "guard": {
                "max_error_rate": 0.2,
                "min_requests": 20,
                "max_latency_ratio": 3.0,
                "latency_floor_ms": 50.0,
                "window": 200,
                "min_feedback_score": None,
                "min_feedback": 10,
                "min_judge_score": None,
                "max_score_drop": None,
                "min_judged": 20,
            },
            "steps": None,
        }
        assert (status["revision"], status["source"]["location"], status["last_error"]) == (
            revision_of(STABLE),
            str(path),
            None,
        )
        assert status["traffic"] == {
            "canary": {
                "requests": 0,
                "errors": 0,
                "unmatched": 0,
                "recent_error_rate": 0.0,
                "p50_ms": None,
                "p95_ms": None,
                "ratings": 0,
                "recent_mean_score": None,
            }
        }
        assert await serving_revisions(service) == (revision_of(STABLE), canary_revision(first))

        service.write_agent(second, filename=canary_filename("bot"))  # an edit rebuilds it
        await wait_canary(service, canary_revision(second))
        assert service.registry.status("bot")["canary"]["weight"] == 30.0
        assert await serving_revisions(service) == (revision_of(STABLE), canary_revision(second))

        await refused_and_still_serving(service, second, canary_path)

        (agents_dir / canary_filename("bot")).unlink()
        await service.registry.wait_for(lambda r: r.entry("bot").canary is None)
        pinned = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Agent-Variant": "canary"}
        )
        assert (pinned.status, await pinned.json()) == (
            404,
            {"error": {"type": "not_found", "message": "agent 'bot' has no canary"}},
        )
        assert service.registry.entry("bot").last_error is None


BROKEN_CANARIES = [
    ("name: bot\nprompt: {system: [unclosed\n", "", "not valid YAML"),
    (
        "name: other\nmodel: {provider: test}\nprompt: {system: hi}\nrollout: {weight: 5}\n",
        "name",
        "a canary must define the agent its file is named after "
        "(name: expected 'bot', found 'other')",
    ),
    (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\n",
        "rollout",
        "a canary needs a rollout block (rollout: add e.g. 'rollout: {weight: 10}')",
    ),
    (
        "name: bot\nmodel: {provider: test}\nprompt: {system: hi}\nrollout: {weight: -1}\n",
        "rollout.weight",
        "invalid rollout (rollout.weight: Input should be greater than or equal to 0)",
    ),
]


async def refused_and_still_serving(
    service: RunningService, serving: dict[str, Any], canary_path: Path
) -> None:
    """Each broken canary file is refused with its field; stable and canary keep serving."""
    for text, field, message in BROKEN_CANARIES:
        service.write_agent(text, filename=canary_filename("bot"))
        status = await service.wait_error("bot", message)
        error = status["last_error"]
        assert isinstance(error.pop("at"), float)
        assert error.pop("message").startswith(f"agent 'bot' {canary_path}: ")
        assert error == {"source": str(canary_path), "path": field}
        assert await serving_revisions(service) == (revision_of(STABLE), canary_revision(serving))
    service.write_agent(serving, filename=canary_filename("bot"))
    await service.registry.wait_for(lambda r: r.entry("bot").last_error is None)


async def wait_canary(service: RunningService, revision: str) -> None:
    def serving(registry: Any) -> bool:
        canary = registry.entry("bot").canary
        return canary is not None and canary.agent.revision == revision

    await service.registry.wait_for(serving)


async def serving_revisions(service: RunningService) -> tuple[str, str]:
    """The revisions that answer ``bot`` pinned to stable, then to canary."""
    found = []
    for variant in ("stable", "canary"):
        response = await service.client.post(
            "/v1/agents/bot/invoke", json={"input": "hi"}, headers={"X-Agent-Variant": variant}
        )
        body = await response.json()
        assert (response.status, body["variant"]) == (200, variant)
        found.append(body["revision"])
    return found[0], found[1]


async def test_a_canary_survives_its_agent_file_being_renamed(
    agents_dir: Path, state_dir: Path
) -> None:
    old_path = write_agent(agents_dir, STABLE, filename="z-bot.yaml")
    write_agent(agents_dir, CANARY, filename=canary_filename("bot"))
    async with running_service(memory_config(agents_dir, state_dir)) as service:
        new_path = (agents_dir / "a-bot.yaml").resolve()
        old_path.rename(new_path)

        def moved(registry: Any) -> bool:
            stable = registry.entry("bot").stable if "bot" in registry else None
            return stable is not None and stable.source.location == str(new_path)

        await service.registry.wait_for(moved)
        assert service.registry.status("bot")["canary"]["revision"] == REVISIONS["canary"]
        assert await serving_revisions(service) == (REVISIONS["stable"], REVISIONS["canary"])
