"""``bench._flat_serve``: the flat run does the work of the service's own run path, so what
``bench.throughput --flat-run`` measures is the layers, not less work: the same answer,
and the same trace event for event; ``bare`` keeps no records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench._process import Child, free_port
from bench._service import AGENT, Service, agent_document, write_config
from bench.scenarios import REPLY_TEXT

_VARYING = ("trace_id", "duration_ms", "at")


async def _run(http: aiohttp.ClientSession, service: Service) -> tuple[dict[str, Any], int, Any]:
    async with http.post(
        f"{service.url}/v1/agents/{AGENT}/invoke", json={"input": "ping"}
    ) as response:
        answer = await response.json()
    async with http.get(f"{service.url}/v1/traces/{answer['trace_id']}") as found:
        trace = await found.json() if found.status == 200 else None
        return answer, found.status, trace


def _shape(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {key: value for key, value in event.items() if key not in _VARYING}
        for event in trace["events"]
    ]


async def test_a_flat_run_answers_and_records_as_the_service_does(tmp_path: Path) -> None:
    agents = tmp_path / "agents"
    agents.mkdir()
    async with Child("bench._model_server") as model:
        document = agent_document(model.ready["base_url"])
        (agents / f"{AGENT}.yaml").write_text(yaml.safe_dump(document))
        config = write_config(tmp_path, agents)

        def serving(name: str, module: tuple[str, ...]) -> Service:
            return Service(config, free_port(), tmp_path / f"{name}.log", {}, module=module)

        async with (
            serving("own", ("dynagent",)) as own,
            serving("flat", ("bench._flat_serve", "records")) as flat,
            serving("bare", ("bench._flat_serve", "bare")) as bare,
            aiohttp.ClientSession() as http,
        ):
            own_answer, _, own_trace = await _run(http, own)
            flat_answer, _, flat_trace = await _run(http, flat)
            bare_answer, bare_status, _ = await _run(http, bare)

    assert own_answer["output"] == flat_answer["output"] == bare_answer["output"] == REPLY_TEXT
    assert {k: v for k, v in flat_answer.items() if k != "trace_id"} == {
        k: v for k, v in own_answer.items() if k != "trace_id"
    }
    assert own_trace is not None and flat_trace is not None
    assert [e["type"] for e in own_trace["events"]] == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert _shape(flat_trace) == _shape(own_trace)
    assert bare_status == 404  # no records: no trace
