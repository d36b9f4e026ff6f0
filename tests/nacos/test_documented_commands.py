"""The README's Nacos section, as a reader runs it: Nacos started by ``scripts/nacos.sh``,
the service on the samples' Nacos config, the console's ``hello`` published, the samples
published, and every agent (the MCP one and the agent calling it included) answering."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.docs import ROOT, Workspace, addressed, of_service, wait_serving
from tests.support.nacos import NacosAdmin, NacosServer
from tests.support.process import free_port

GROUP = "AGENTS"
"""The README's group (no other test uses it: each has a group of its own)."""


def console_publish(server: NacosServer, data_id: str, text: str) -> list[str]:
    """Publish as the console does (its HTTP API); the group's dataIds after."""

    async def publish() -> list[str]:
        async with NacosAdmin(server.base_url) as admin:
            if data_id:
                await admin.publish(data_id, GROUP, text)
            return await admin.data_ids(GROUP)

    return asyncio.run(publish())


def test_the_blocks_of_the_nacos_section_run_verbatim(
    nacos_server: NacosServer, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    environ = {
        **nacos_server.environ(),
        "NACOS_SERVER_ADDR": nacos_server.addr,
        "DYNAGENT_PORT": str(port),
        "DYNAGENT_URL": url,
    }
    workspace = Workspace(tmp_path, environ)
    steps = of_service("nacos")
    assert [b.action for b in steps][:1] == ["setup"]
    setup, *rest = steps
    with workspace.setup(setup, addressed(setup.text, port, nacos_server.addr), url):
        for block in rest:
            if block.action == "publish":  # what the reader does in the console
                console_publish(nacos_server, block.words[1], block.text)
                wait_serving(url, (block.words[1].split(".")[0],))
                continue
            wait_serving(url, block.words[2:] if block.words[1:2] == ("wait",) else ())
            workspace.run(block, addressed(block.text, port, nacos_server.addr))
        served = workspace.run(
            setup,
            f"curl -s {url}/v1/agents/librarian/invoke -H 'Content-Type: application/json' "
            """-d '{"input": "returns?"}'\n""",
        )
    assert '"agent": "librarian"' in served
    samples = ("assistant", "concierge", "librarian", "support-bot", "ticket-triage")
    suites = sorted(p.name for p in (ROOT / "config-samples" / "agents").glob("*.evals.yaml"))
    assert suites  # the samples' suites are published beside their agents
    assert console_publish(nacos_server, "", "") == sorted(
        [
            "hello.agent.yaml",
            "assistant.canary.yaml",
            *(f"{n}.agent.yaml" for n in samples),
            *suites,
        ]
    )
