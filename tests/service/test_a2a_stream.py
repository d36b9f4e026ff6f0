"""``message/stream`` streams: a task, then its tool steps and the answer's words as the
run goes, as the ``a2a-sdk`` clients of both protocol lines (0.3 here, 1.x in a virtualenv
of its own, through its 0.3 compatibility transport) read them."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, TextPart

from tests.support import DEFAULT_MODEL, CallTools, Fail, Reply, ScriptedModelServer
from tests.support.service import agent_document, running_service, service_config, write_agent

ROOT = Path(__file__).resolve().parents[2]
A2A_1X_PYTHON = ROOT / ".cache" / "a2a-sdk-1" / "bin" / "python"
"""The virtualenv ``make setup`` makes with the ``a2a-sdk`` 1.x client."""
A2A_1X_CLIENT = ROOT / "tests" / "support" / "a2a_client_1x.py"

Compact = tuple[Any, ...]
"""An update reduced to what both protocol lines say: its kind and content."""

TOOL_CALL = {"call_id": "call_1_0", "name": "calculator", "arguments": '{"expression": "6*7"}'}
TOOL_RESULT = {"call_id": "call_1_0", "name": "calculator", "output": "42", "is_error": False}
ANSWERED = [
    ("task", "working"),
    ("status", "working", {"tool_call": TOOL_CALL}),
    ("status", "working", {"tool_result": TOOL_RESULT}),
    ("artifact", "It ", False, False),
    ("artifact", "is 42.", True, False),  # the words after the pause (joined, if close)
    ("artifact", "", True, True),  # the streamed text was the answer: only the close
    ("status", "completed", None),
]
"""A run that calls a tool, then answers "It is 42." in three pieces."""


def message(text: str) -> Message:
    return Message(
        role=Role.user, message_id=uuid.uuid4().hex, parts=[Part(root=TextPart(text=text))]
    )


def joined(updates: list[Compact]) -> list[Compact]:
    """Chunks that append to the one before joined (the delta window may or may not have
    joined them on the way)."""
    out: list[Compact] = []
    for update in updates:
        last = out[-1] if out else None
        if (
            last is not None
            and update[0] == last[0] == "artifact"
            and update[2]
            and last[2]
            and update[1]
            and not last[3]
        ):
            out[-1] = ("artifact", last[1] + update[1], last[2], False)
        else:
            out.append(update)
    return out


def compact_0_3(wire: dict[str, Any]) -> Compact:
    """An event of the 0.3 wire (JSON, camelCase) in the compact form."""
    if wire["kind"] == "task":
        return ("task", wire["status"]["state"])
    if wire["kind"] == "artifact-update":
        (part,) = wire["artifact"]["parts"]
        return ("artifact", part["text"], wire.get("append", False), wire.get("lastChunk", False))
    status = wire["status"]
    parts = status.get("message", {}).get("parts", [])
    return (
        "status",
        status["state"],
        parts[0].get("data", parts[0].get("text")) if parts else None,
    )


def compact_1x(event: dict[str, Any]) -> Compact:
    """A ``StreamResponse`` of the 1.x client (protobuf JSON) in the compact form."""
    (kind, body), *_ = event.items()
    if kind == "task":
        return ("task", _state(body["status"]["state"]))
    if kind == "artifactUpdate":
        (part,) = body["artifact"]["parts"]
        return (
            "artifact",
            part.get("text", ""),
            body.get("append", False),
            body.get("lastChunk", False),
        )
    status = body["status"]
    parts = status.get("message", {}).get("parts", [])
    content = parts[0].get("data", parts[0].get("text")) if parts else None
    return ("status", _state(status["state"]), content)


def _state(name: str) -> str:
    return name.removeprefix("TASK_STATE_").lower()


async def stream_0_3(
    url: str, text: str, on_event: Callable[[Compact], None]
) -> list[dict[str, Any]]:
    """Every event the 0.3 client yields, as its wire JSON."""
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        seen = []
        async for item in client.send_message(message(text)):
            assert isinstance(item, tuple), item  # a task and its update, never one message
            task, update = item
            wire = (update or task).model_dump(mode="json", by_alias=True, exclude_none=True)
            seen.append(wire)
            on_event(compact_0_3(wire))
        return seen


async def stream_1x(
    url: str, text: str, on_event: Callable[[Compact], None]
) -> list[dict[str, Any]]:
    """Every event the 1.x client yields, as protobuf JSON (a process of its own)."""
    if not A2A_1X_PYTHON.exists():
        pytest.fail(f"no {A2A_1X_PYTHON}: `make setup` makes the a2a-sdk 1.x virtualenv")
    process = await asyncio.create_subprocess_exec(
        str(A2A_1X_PYTHON),
        str(A2A_1X_CLIENT),
        url,
        "",
        text,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    seen = []
    try:
        async for line in _lines(process.stdout):
            event = json.loads(line)
            seen.append(event)
            on_event(compact_1x(event))
        errors = await process.stderr.read()
        assert await process.wait() == 0, errors.decode()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return seen


async def _lines(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    while line := await stream.readline():
        yield line


CLIENTS = {"a2a-sdk 0.3": stream_0_3, "a2a-sdk 1.x": stream_1x}


@pytest.mark.parametrize("client", CLIENTS)
async def test_message_stream_sends_tool_steps_and_the_answer_as_the_model_writes_it(
    client: str, model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    """The model holds the rest of its answer until the client has seen the first word: a
    server that sent its reply only at the end of the run never gets there."""
    released = asyncio.Event()
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("calculator", {"expression": "6*7"})]),
            Reply("It is 42.", pieces=["It ", "is ", "42."], pause=released),
        ],
    )
    write_agent(agents_dir, agent_document("bot", model_server, tools=["calculator"]))

    def on_event(update: Compact) -> None:
        if update[0] == "artifact" and not released.is_set():
            assert update == ("artifact", "It ", False, False)
            released.set()  # the model writes the rest only now

    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        seen = await CLIENTS[client](f"{service.url}/a2a/bot", "6 times 7?", on_event)
    model_server.assert_complete()
    compact = [compact_0_3(e) if "kind" in e else compact_1x(e) for e in seen]
    assert joined(compact) == ANSWERED


async def test_a_stream_is_one_task_every_update_names_and_a_final_status_closes(
    model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    model_server.script(DEFAULT_MODEL, [Reply("Hello there", pieces=["Hello ", "there"])])
    write_agent(agents_dir, agent_document("bot", model_server))
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        seen = await stream_0_3(f"{service.url}/a2a/bot", "hi", lambda _: None)
    task, *updates, closing, completed = seen
    ids = {"taskId": task["id"], "contextId": task["contextId"]}
    trace = {"trace_id": task["metadata"]["trace_id"]}
    asked = task["history"][0]
    assert task == {
        "kind": "task",
        "id": task["id"],
        "contextId": task["contextId"],
        "status": {"state": "working"},
        "history": [
            {
                "kind": "message",
                "role": "user",
                "messageId": asked["messageId"],
                **ids,
                "parts": [{"kind": "text", "text": "hi"}],
            }
        ],
        "metadata": trace,
    }
    chunk = {"kind": "artifact-update", **ids, "lastChunk": False}
    artifact = {"artifactId": "answer", "name": "answer"}
    texts = [u["artifact"]["parts"][0]["text"] for u in updates]
    assert "".join(texts) == "Hello there"
    assert updates == [
        {
            **chunk,
            "append": n > 0,
            "artifact": {**artifact, "parts": [{"kind": "text", "text": text}]},
        }
        for n, text in enumerate(texts)
    ]
    assert closing == {
        **chunk,
        "append": True,
        "lastChunk": True,
        "artifact": {**artifact, "parts": [{"kind": "text", "text": ""}]},
    }
    assert completed == {
        "kind": "status-update",
        **ids,
        "status": {"state": "completed"},
        "final": True,
        "metadata": trace,
    }
    model_server.assert_complete()


@pytest.mark.parametrize("client", CLIENTS)
async def test_text_that_was_not_the_answer_is_replaced_in_the_artifact(
    client: str, model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    """Words a model writes before a tool call, and structured output whose final form is
    not the streamed text, are replaced (``append: false``), never left in the answer."""
    model_server.script(
        DEFAULT_MODEL,
        [
            CallTools([("calculator", {"expression": "6*7"})], text="Let me see."),
            Reply('{"n":42}', pieces=['{"n":', "42}"]),
        ],
    )
    output = {"schema": {"type": "object", "required": ["n"]}}
    write_agent(
        agents_dir, agent_document("bot", model_server, tools=["calculator"], output=output)
    )
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        seen = await CLIENTS[client](f"{service.url}/a2a/bot", "6 times 7?", lambda _: None)
    compact = [compact_0_3(e) if "kind" in e else compact_1x(e) for e in seen]
    assert joined(compact) == [
        ("task", "working"),
        ("artifact", "Let me see.", False, False),
        ("status", "working", {"tool_call": TOOL_CALL}),
        ("status", "working", {"tool_result": TOOL_RESULT}),
        ("artifact", '{"n":42}', False, False),
        ("artifact", '{"n": 42}', False, True),
        ("status", "completed", None),
    ]
    model_server.assert_complete()


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_run_that_fails_ends_its_stream_with_a_failed_status(
    client: str, model_server: ScriptedModelServer, agents_dir: Path, state_dir: Path
) -> None:
    model_server.script(DEFAULT_MODEL, [Fail(400)])
    write_agent(agents_dir, agent_document("bot", model_server))
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        seen = await CLIENTS[client](f"{service.url}/a2a/bot", "hi", lambda _: None)
    compact = [compact_0_3(e) if "kind" in e else compact_1x(e) for e in seen]
    assert compact[0] == ("task", "working")
    assert compact[1:2] == [("status", "failed", compact[1][2])] and "400" in compact[1][2]
    assert len(compact) == 2, compact
    model_server.assert_complete()
