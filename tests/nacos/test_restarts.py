"""A restart while Nacos is down: what the service says about itself, every reason it
is degraded until each clears.

"Nacos down" for a restarted service is an address nothing listens on, with the same
snapshot folder: the session's server keeps running for the other tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynagent.config import NacosConfig
from tests.support.nacos import (
    nacos_service_config,
    yaml_text,
)
from tests.support.process import free_port
from tests.support.service import RunningService, agent_document, running_service


def nacos_down(settings: NacosConfig) -> NacosConfig:
    """``settings`` with Nacos unreachable: same groups, same snapshot folder."""
    return settings.model_copy(update={"server_addr": f"127.0.0.1:{free_port()}"})


async def readyz(service: RunningService) -> tuple[int, Any]:
    response = await service.client.get("/readyz")
    return response.status, await response.json()


async def test_every_degradation_reason_stays_until_it_clears(
    nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    """Started with Nacos down and a snapshot file it cannot read: the reconnect loop's
    own reason (Nacos still unreachable) joins the skipped file; it never replaces it."""
    settings = nacos_down(nacos_settings)
    snapshot = settings.snapshot_dir / "public" / settings.group
    snapshot.mkdir(parents=True)
    (snapshot / "bot.agent.yaml").write_text(yaml_text(agent_document("bot")))
    (snapshot / "cut.agent.yaml").write_bytes(b"name: cut\nprompt: {system: Gr\xc3")
    source = f"nacos:public/{settings.group}"
    skipped = "unreadable snapshot files skipped: cut.agent.yaml (not valid UTF-8 at byte 29)"
    async with running_service(nacos_service_config(settings, agents_dir, state_dir)) as service:
        assert service.registry.degraded[source].endswith(skipped)
        await service.registry.wait_for(
            lambda r: "serving last known definitions" in r.degraded[source], within=15
        )
        code, ready = await readyz(service)
        assert (code, ready["degraded"][source]) == (
            200,
            f"Nacos unreachable, serving last known definitions: cannot reach Nacos at "
            f"{settings.server_addr}: no answer within 5 s; {skipped}",
        )
