"""Nacos 3 fuzzy watch: a new dataId is pushed, not found by the list poll.

The reconcile period here is 300 s, so every agent served below arrived by push:
without the fuzzy watch none of them would appear within the test."""

from __future__ import annotations

from pathlib import Path

from dynagent.config import NacosConfig
from dynagent.http.state import SERVICE
from dynagent.nacos.factory import NacosAgentBuilderFactory
from tests.support.nacos import NacosAdmin, nacos_service_config, yaml_text
from tests.support.service import agent_document, revision_of, running_service


async def test_a_new_data_id_is_pushed_to_the_service_and_a_deleted_one_removed(
    nacos: NacosAdmin, nacos_settings: NacosConfig, agents_dir: Path, state_dir: Path
) -> None:
    settings = nacos_settings.model_copy(update={"poll_seconds": 300})
    group = settings.group
    first = agent_document("first", system="Present at start.")
    await nacos.publish("first.agent.yaml", group, yaml_text(first))
    config = nacos_service_config(settings, agents_dir, state_dir)
    async with running_service(config) as service:
        await service.wait_serving("first", revision_of(first))
        factory = service.app[SERVICE].factories["nacos"]
        assert isinstance(factory, NacosAgentBuilderFactory) and factory.source is not None
        assert factory.source.fuzzy_watching

        for index in range(3):
            fresh = agent_document(f"new-{index}", system=f"Published later, {index}.")
            await nacos.publish(f"new-{index}.agent.yaml", group, yaml_text(fresh))
            await service.wait_serving(f"new-{index}", revision_of(fresh))

        # Not an agent document: the watch sees it, the source ignores it.
        await nacos.publish("notes.txt", group, "not an agent")
        await nacos.delete("new-1.agent.yaml", group)
        await service.registry.wait_for(lambda r: "new-1" not in r)
        assert [entry.name for entry in service.registry] == ["first", "new-0", "new-2"]
