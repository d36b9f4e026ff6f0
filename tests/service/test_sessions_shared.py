"""``sessions.store: redis`` in the service: two instances of the app sharing one real
redis-server serve one conversation, the way replicas behind a load balancer do."""

from __future__ import annotations

from pathlib import Path

from tests.support import Reply, ScriptedModelServer
from tests.support.redis import RedisServer, redis_server
from tests.support.service import agent_document, running_service, service_config, write_agent

__all__ = ["redis_server"]


async def test_a_session_alternating_two_instances_continues(
    model_server: ScriptedModelServer, redis_server: RedisServer, agents_dir: Path, tmp_path: Path
) -> None:
    write_agent(agents_dir, agent_document("bot", model_server, system="Be brief."))
    echo = Reply(lambda body: "re: " + str(body["messages"][-1]["content"]))
    model_server.script("gpt-main", [echo] * 3)
    sessions = {"store": "redis", "url": redis_server.url}
    one_config = service_config(agents_dir, tmp_path / "one", sessions=sessions)
    two_config = service_config(agents_dir, tmp_path / "two", sessions=sessions)
    async with running_service(one_config) as one, running_service(two_config) as two:
        for turn, service in enumerate([one, two, one]):
            response = await service.client.post(
                "/v1/agents/bot/invoke", json={"input": f"turn {turn}", "session_id": "conv"}
            )
            assert response.status == 200, await response.text()

    system = {"role": "system", "content": "Be brief."}
    history: list[dict[str, str]] = []
    expected = []
    for turn in range(3):
        history.append({"role": "user", "content": f"turn {turn}"})
        expected.append([system, *history])
        history.append({"role": "assistant", "content": f"re: turn {turn}"})
    assert [body["messages"] for body in model_server.requests] == expected
