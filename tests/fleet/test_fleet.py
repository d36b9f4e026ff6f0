"""The fleet as callers and operators see it: real Nacos, real Redis, three ``dynagent serve``
processes and nginx in front (``scripts/fleet.sh``). Each test publishes agents of its own,
on a scripted model server of its own, into the fleet's Nacos group."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import yaml
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from dynagent.registry.canary import picks_canary
from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer, Slow
from tests.support.canary import Load, canary_document, canary_revision
from tests.support.fleet import Fleet, until
from tests.support.nacos import NacosAdmin, yaml_text
from tests.support.process import free_port
from tests.support.service import agent_document, revision_of


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def status(http: aiohttp.ClientSession, url: str, name: str) -> dict[str, Any] | None:
    async with http.get(f"{url}/v1/agents/{name}") as response:
        return await response.json() if response.status == 200 else None


async def serving_everywhere(
    http: aiohttp.ClientSession, fleet: Fleet, name: str, revision: str
) -> None:
    async def check() -> bool:
        found = [await status(http, fleet.replica_url(n), name) for n in range(1, 4)]
        return all(s is not None and s["revision"] == revision for s in found)

    await until(check, 15, f"{name}@{revision} on every replica")


def canary_on_all(
    http: aiohttp.ClientSession, fleet: Fleet, name: str
) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        found = [await status(http, fleet.replica_url(n), name) for n in range(1, 4)]
        return all(s is not None and s["canary"] is not None for s in found)

    return check


async def invoke(
    http: aiohttp.ClientSession, url: str, name: str, body: dict[str, Any], **headers: str
) -> tuple[int, Any]:
    async with http.post(f"{url}/v1/agents/{name}/invoke", json=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def runs_per_replica(http: aiohttp.ClientSession, fleet: Fleet, name: str) -> list[float]:
    """How many runs of ``name`` each replica served, as its ``/metrics`` counts them."""
    counts = []
    for n in range(1, 4):
        async with http.get(f"{fleet.replica_url(n)}/metrics") as response:
            text = await response.text()
        counts.append(
            sum(
                sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.name == "dynagent_requests_total" and sample.labels["agent"] == name
            )
        )
    return counts


async def listed_by(http: aiohttp.ClientSession, fleet: Fleet, trace: str) -> list[int]:
    """The replicas whose traces list (``GET /v1/traces``) has ``trace``."""
    found = []
    for n in range(1, 4):
        async with http.get(f"{fleet.replica_url(n)}/v1/traces") as response:
            listed = await response.json()
        if trace in (run["trace_id"] for run in listed["traces"]):
            found.append(n)
    return found


async def test_a_session_alternating_replicas_continues(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = unique("chat")
    document = agent_document(name, model_server, system="Count.", model={"name": name})
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(document))
    await serving_everywhere(http, fleet, name, revision_of(document))
    model_server.script(name, [Reply(lambda body: str(len(body["messages"])))] * 6)

    served_by: list[int] = []
    for turn in range(6):
        before = await runs_per_replica(http, fleet, name)
        code, body = await invoke(
            http, fleet.url, name, {"input": f"turn {turn}", "session_id": "conversation"}
        )
        assert (code, body["output"]) == (200, str(2 + 2 * turn))  # system + all turns so far
        after = await runs_per_replica(http, fleet, name)
        served_by += [n for n, (a, b) in enumerate(zip(after, before, strict=True), 1) if a > b]
        # every replica lists the run and reads it, whichever ran it
        assert await listed_by(http, fleet, body["trace_id"]) == [1, 2, 3]
    assert len(served_by) == 6 and set(served_by) == {1, 2, 3}, served_by
    for n in range(1, 4):
        async with http.get(f"{fleet.replica_url(n)}/v1/traces/{body['trace_id']}") as response:
            assert response.status == 200
    assert model_server.requests[-1]["messages"][1:] == [
        message
        for turn in range(5)
        for message in (
            {"role": "user", "content": f"turn {turn}"},
            {"role": "assistant", "content": str(2 + 2 * turn)},
        )
    ] + [{"role": "user", "content": "turn 5"}]


async def test_a_canary_failing_on_one_replica_is_paused_on_all_and_after_a_restart(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = unique("guarded")
    stable = agent_document(name, model_server, system="Stable.", model={"retries": 0})
    candidate = agent_document(
        name, model_server, system="Canary.", model={"name": f"{name}-canary", "retries": 0}
    )
    canary = canary_document(candidate, weight=50, guard={"min_requests": 5})
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(stable))
    await nacos.publish(f"{name}.canary.yaml", fleet.group, yaml_text(canary))
    await serving_everywhere(http, fleet, name, revision_of(stable))

    await until(canary_on_all(http, fleet, name), 15, "the canary on every replica")
    model_server.script(f"{name}-canary", [Fail(500)] * 5)
    keys = [k for k in (str(i) for i in range(1000)) if picks_canary(name, k, 50)]
    for caller in keys[:5]:  # only replica 1 sees the failures, of callers routed to the canary
        code, _ = await invoke(
            http, fleet.replica_url(1), name, {"input": "hi"}, **{"X-Canary-Key": caller}
        )
        assert code == 502

    async def paused_everywhere() -> bool:
        found = [await status(http, fleet.replica_url(n), name) for n in range(1, 4)]
        return all(s is not None and (s["canary"]["pulled"] or {}).get("recorded") for s in found)

    seconds = await until(paused_everywhere, 2.0, "the pause on every replica")
    print(f"\nguard pull on replica 1 -> paused on all 3 in {seconds * 1000:.0f} ms")
    config = await nacos.get(f"{name}.canary.yaml", fleet.group)
    assert config is not None
    assert yaml.safe_load(config["content"])["rollout"]["paused"]["by"] == "guard"

    await asyncio.to_thread(fleet.restart_replica, 3)
    restarted = await status(http, fleet.replica_url(3), name)
    assert restarted is not None and restarted["canary"]["state"] == "pulled"
    model_server.script(DEFAULT_MODEL, [Reply("stable")] * 20)
    for key in range(20):  # callers of every bucket get the stable through nginx
        code, body = await invoke(
            http, fleet.url, name, {"input": "hi"}, **{"X-Canary-Key": f"{key}"}
        )
        assert (code, body["variant"]) == (200, "stable")


async def test_a_progressive_rollout_advances_through_its_steps_and_promotes(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = unique("stepped")
    stable = agent_document(name, model_server, system="Stable.")
    candidate = agent_document(name, model_server, system="Next.", model={"name": f"{name}-next"})
    rollout = {"steps": [10, 50, 100], "step_after": {"requests": 2}, "auto_promote": True}
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(stable))
    await nacos.publish(
        f"{name}.canary.yaml", fleet.group, yaml_text({**candidate, "rollout": rollout})
    )
    await serving_everywhere(http, fleet, name, revision_of(stable))
    model_server.script(f"{name}-next", [Reply("next")], cycle=True)
    # A routed caller may reach the old stable on a replica that has read the promotion's
    # canary removal before its new stable definition.
    model_server.script(DEFAULT_MODEL, [Reply("stable")], cycle=True)

    await until(canary_on_all(http, fleet, name), 15, "the canary on every replica")
    weights_seen: list[float] = []
    # Callers the router sends to the canary from its first step on (only routed traffic
    # counts for a step).
    keys = (k for k in (str(i) for i in range(100_000)) if picks_canary(name, k, 10))

    async def promoted() -> bool:
        current = await status(http, fleet.replica_url(1), name)
        assert current is not None
        if current["canary"] is None:
            return True
        if not weights_seen or weights_seen[-1] != current["canary"]["weight"]:
            weights_seen.append(current["canary"]["weight"])
        await invoke(http, fleet.url, name, {"input": "hi"}, **{"X-Canary-Key": next(keys)})
        return False

    await until(promoted, 60, "the promotion")
    await serving_everywhere(http, fleet, name, canary_revision(candidate))
    assert weights_seen[0] == 10 and weights_seen[-1] in (50, 100), weights_seen
    data_ids = await nacos.data_ids(fleet.group)
    assert f"{name}.agent.yaml" in data_ids and f"{name}.canary.yaml" not in data_ids


async def test_sigkill_of_one_replica_under_load_fails_only_its_requests_in_flight(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = unique("loaded")
    document = agent_document(name, model_server, system="Load.", model={"name": name})
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(document))
    await serving_everywhere(http, fleet, name, revision_of(document))
    model_server.script(name, [Slow(0.05, Reply("ok"))], cycle=True)
    workers = 6
    async with Load(http, f"{fleet.url}/v1/agents/{name}/invoke", workers=workers) as load:
        await load.until(60)
        fleet.kill_replica(2)
        killed_at = len(load.answers)
        await load.until(killed_at + 180)
    failures = load.failures()
    assert len(failures) <= workers, failures  # at most the requests in flight on replica 2
    assert {(a.status, a.body["error"]["type"]) for a in failures} <= {(502, "unavailable")}
    assert [a for a in load.answers[-60:] if a.status != 200] == []  # the others serve on
    print(f"\nSIGKILL of 1 of 3 replicas under load: {len(failures)} of {len(load.answers)} failed")
    await asyncio.to_thread(fleet.restart_replica, 2)


async def test_redis_restarted_mid_load_loses_no_committed_turn(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    name = unique("remember")
    document = agent_document(name, model_server, system="Count.", model={"name": name})
    await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(document))
    await serving_everywhere(http, fleet, name, revision_of(document))
    model_server.script(name, [Reply(lambda body: str(len(body["messages"])))], cycle=True)
    committed: dict[str, int] = {}
    outcomes: list[tuple[str, int, Any]] = []

    async def conversation(session: str, turns: int) -> None:
        committed[session] = 0
        for turn in range(turns):
            code, body = await invoke(
                http, fleet.url, name, {"input": f"{turn}", "session_id": session}
            )
            outcomes.append((session, code, body))
            if code == 200:  # every committed turn so far is in the context
                assert body["output"] == str(2 + 2 * committed[session]), (session, body)
                committed[session] += 1

    sessions = [conversation(f"s{i}", 12) for i in range(6)]
    talking = asyncio.gather(*sessions)

    async def twenty() -> bool:
        return len(outcomes) >= 20

    await until(twenty, 30, "20 turns")
    await asyncio.to_thread(fleet.restart_redis)
    await talking
    failed = [(s, c, b) for s, c, b in outcomes if c != 200]
    print(f"\nRedis restarted mid-load: {len(failed)} of {len(outcomes)} turns failed")
    assert all(c == 503 for _, c, _ in failed), failed
    assert sum(committed.values()) == len(outcomes) - len(failed)


async def test_shadow_runs_never_reach_a_tool_that_is_not_shadow_safe(
    fleet: Fleet, nacos: NacosAdmin, http: aiohttp.ClientSession, model_server: ScriptedModelServer
) -> None:
    hits: list[str] = []

    async def record(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{what}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        name = unique("shadowed")

        def http_tool(tool: str, method: str, safe: bool) -> dict[str, Any]:
            return {
                "type": "http",
                "name": tool,
                "method": method,
                "url": f"http://127.0.0.1:{port}/{tool}",
                "allow_hosts": ["127.0.0.1"],
                "allow_private": True,
                "shadow_safe": safe,
            }

        tools = [http_tool("refund", "POST", False), http_tool("lookup", "GET", True)]
        stable = agent_document(name, model_server, system="Stable.", tools=tools)
        candidate = agent_document(
            name, model_server, system="Canary.", model={"name": f"{name}-c"}, tools=tools
        )
        await nacos.publish(f"{name}.agent.yaml", fleet.group, yaml_text(stable))
        await nacos.publish(
            f"{name}.canary.yaml",
            fleet.group,
            yaml_text(canary_document(candidate, weight=0, shadow=100)),
        )
        await serving_everywhere(http, fleet, name, revision_of(stable))
        await until(canary_on_all(http, fleet, name), 15, "the canary on every replica")
        model_server.script(DEFAULT_MODEL, [Reply("stable")] * 6)
        model_server.script(
            f"{name}-c", [CallTools([("refund", {}), ("lookup", {})]), Reply("canary")] * 6
        )
        for _ in range(6):
            code, body = await invoke(http, fleet.url, name, {"input": "refund me"})
            assert (code, body["variant"], body["output"]) == (200, "stable", "stable")

        async def shadows_done() -> bool:
            found = [await status(http, fleet.replica_url(n), name) for n in range(1, 4)]
            done = sum(s["traffic"].get("canary", {}).get("requests", 0) for s in found if s)
            return bool(done == 6)

        await until(shadows_done, 15, "six shadow runs")
        assert hits == ["/lookup"] * 6  # the unsafe refund was never called
    finally:
        await runner.cleanup()


async def test_a_replica_killed_starts_again_at_once(
    fleet: Fleet, http: aiohttp.ClientSession
) -> None:
    # The killed process is a zombie until init reaps it; fleet.sh took that for a replica
    # still running, and start-replica started nothing.
    killed = fleet.kill_replica(3)
    await asyncio.to_thread(fleet.start_replica, 3)
    assert fleet.replica_pid(3) != killed
    async with http.get(f"{fleet.replica_url(3)}/readyz") as response:
        assert response.status == 200
