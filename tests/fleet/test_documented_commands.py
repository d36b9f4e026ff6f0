"""docs/fleet.md as a reader runs it, on the session's fleet: ``scripts/fleet.sh up``
publishes the samples, and every sample (the MCP one and the agent calling it included)
answers on every replica."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.support.docs import Workspace, addressed, of_service, wait_serving
from tests.support.fleet import Fleet

SAMPLES = ("assistant", "concierge", "librarian", "support-bot", "ticket-triage")


def invoke(url: str, name: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"{url}/v1/agents/{name}/invoke",
        data=json.dumps({"input": "When are you open?"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, object] = json.loads(response.read())
        return answer


def test_the_fleet_blocks_run_verbatim_and_every_sample_serves_on_every_replica(
    fleet: Fleet, tmp_path: Path
) -> None:
    environ = {**fleet.environ(), "FLEET_SAMPLES": "1"}  # as `up` has it by default
    workspace = Workspace(tmp_path, environ)
    steps = of_service("fleet")
    assert [b.action for b in steps] == ["run"] * len(steps) and steps
    first = steps[0]
    # The samples are not in the fleet's group yet: `up` (idempotent) publishes them, and
    # the first call reaches a replica that may not have loaded them: wait as a reader would.
    workspace.run(first, "scripts/fleet.sh up\n")
    for n in range(1, fleet.replicas + 1):
        wait_serving(fleet.replica_url(n), SAMPLES)
    for block in steps:
        workspace.run(block, addressed(block.text, fleet.port))
    for n in range(1, fleet.replicas + 1):
        wait_serving(fleet.replica_url(n), SAMPLES)  # the restarted replica too
        answers = {name: invoke(fleet.replica_url(n), name) for name in SAMPLES}
        assert {name: a["agent"] for name, a in answers.items()} == {n: n for n in SAMPLES}
