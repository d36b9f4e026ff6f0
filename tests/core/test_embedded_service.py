"""The service without HTTP: built, run and stopped by a program that embeds it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from tests.support.process import write_config

AGENT = {
    "name": "echo-bot",
    "model": {"provider": "test", "name": "offline"},
    "prompt": {"system": "You answer briefly."},
    "tools": ["calculator"],
}

PROGRAM = textwrap.dedent(
    """
    import asyncio, json, sys
    from pathlib import Path

    from dynagent.config import load_config
    from dynagent.core.auth import Caller
    from dynagent.core import RunRequest, run_agent
    from dynagent.core.service import Service


    async def main() -> None:
        service = Service.create(load_config(Path(sys.argv[1])), environ={})
        async with service.running():
            run = RunRequest(
                name="echo-bot", input="What is 2 + 3?", session_id="s1", variables={},
                pin=None, endpoint="embedded",
            )
            who = Caller("embedder")
            agent, result = await run_agent(service, who, run)
            trace = service.traces.get(result.trace_id, who)
            print(json.dumps({
                "agent": agent.name,
                "variant": result.variant,
                "output": result.output,
                "traced": trace is not None,
                "http_loaded": sorted(m for m in sys.modules if m.startswith("dynagent.http")),
                "web_loaded": "aiohttp.web" in sys.modules,
            }))
        print(json.dumps({"ready_after_stop": service.registry.ready}))


    asyncio.run(main())
    """
)


def test_a_program_runs_an_agent_through_the_service_without_the_http_adapter(
    tmp_path: Path,
) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    (agents / "echo-bot.yaml").write_text(yaml.safe_dump(AGENT), encoding="utf-8")
    config = write_config(
        tmp_path,
        {
            "sessions": {"store": "memory"},
            "factories": {"default": {"directory": str(agents)}},
        },
    )
    script = tmp_path / "embed.py"
    script.write_text(PROGRAM, encoding="utf-8")

    done = subprocess.run(
        [sys.executable, str(script), str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    first, last = (json.loads(line) for line in done.stdout.splitlines())
    assert {k: v for k, v in first.items() if k != "output"} == {
        "agent": "echo-bot",
        "variant": "stable",
        "traced": True,
        "http_loaded": [],
        "web_loaded": False,
    }
    assert first["output"] == (  # the offline model used the tool on the caller's arithmetic
        "[test model] you said: What is 2 + 3? | calculator(2 + 3) -> 5 | prompt: You answer "
        "briefly."
    )
    assert last == {"ready_after_stop": True}
