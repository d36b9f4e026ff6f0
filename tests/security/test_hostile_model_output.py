"""A model's answer is outside input too: one nested past the parser's recursion limit is an
invalid answer (sent back to the model, then 422), never a 500."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import DEFAULT_MODEL, Reply, ScriptedModelServer
from tests.support.service import agent_document, running_service, service_config

DEEP = "[" * 5000 + "]" * 5000
SELF_REFERENCE = {"type": "array", "items": {"$ref": "#"}}


async def test_an_answer_nested_too_deep_is_invalid_not_a_crash(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    documents = {
        "retrying": agent_document("retrying", model_server, output={"schema": {"type": "array"}}),
        "strict": agent_document(
            "strict",
            model_server,
            model={"name": "m-strict"},
            output={"schema": SELF_REFERENCE, "retries": 0},
        ),
    }
    for name, document in documents.items():
        (agents_dir / f"{name}.yaml").write_text(json.dumps(document), encoding="utf-8")

    def told_to_fix(body: dict[str, object]) -> None:
        last = body["messages"][-1]  # type: ignore[index]
        assert last["role"] == "user" and "the answer nests too deeply" in last["content"]

    model_server.script(DEFAULT_MODEL, [Reply(DEEP), Reply("[[1]]", expect=told_to_fix)])
    # Within the JSON parser's reach, but deeper than the validator's recursion.
    model_server.script("m-strict", [Reply("[" * 900 + "]" * 900)])
    async with running_service(service_config(agents_dir, state_dir)) as service:
        fixed = await service.client.post("/v1/agents/retrying/invoke", json={"input": "x"})
        refused = await service.client.post("/v1/agents/strict/invoke", json={"input": "x"})
        assert (fixed.status, (await fixed.json())["output"]) == (200, [[1]])
        assert refused.status == 422
        error = (await refused.json())["error"]
        assert isinstance(error.pop("trace_id"), str)
        assert error == {
            "type": "output_invalid",
            "message": "the final answer does not match the output schema: "
            "the answer nests too deeply",
        }
