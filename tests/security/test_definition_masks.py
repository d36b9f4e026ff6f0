"""What a definition contributes to the masks belongs to that definition: replaced when it
is edited, gone when it is removed, and never a word of the protocol — a URL's query
values (``?a=serving&b=forbidden``) once became masks that rewrote every agent's state and
every caller's error type as ``***`` until the service restarted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dynagent import AgentBuilder, Resources, Tool, ToolRegistry, load_spec
from dynagent.http.state import SERVICE
from dynagent.masking import MASK, SecretValues, is_protocol_word
from tests.support.service import agent_document, revision_of, running_service, service_config

WORDS = ("serving", "forbidden", "not_found", "revision", "application/json", "tool_error")
FIRST_KEY = "qk-0123456789abcdef"
SECOND_KEY = "qk-fedcba9876543210"


def with_partner(name: str, key: str) -> dict[str, Any]:
    """An agent whose remote-agent tool's URL carries protocol words and a key in its query
    (the tool is only built: nothing connects)."""
    query = "&".join(f"w{i}={word}" for i, word in enumerate(WORDS)) + f"&key={key}"
    url = f"https://agents.example.com/a2a/partner?{query}"
    tool = {"type": "agent", "name": "partner", "a2a": {"url": url}}
    return agent_document(name, tools=[tool])


async def test_a_definitions_values_never_mask_protocol_words_and_go_with_the_definition(
    agents_dir: Path, state_dir: Path
) -> None:
    async with running_service(service_config(agents_dir, state_dir), environ={}) as service:
        secrets = service.app[SERVICE].secrets
        plain, partnered = agent_document("plain"), with_partner("partnered", FIRST_KEY)
        for document in (plain, partnered):
            service.write_agent(document)
            await service.wait_serving(document["name"], revision_of(document))

        listing = await (await service.client.get("/v1/agents")).json()
        missing = await service.client.post("/v1/agents/nobody/invoke", json={"input": "hi"})
        answer = await service.client.post("/v1/agents/plain/invoke", json={"input": "serving"})
        assert [(a["name"], a["state"], a["revision"]) for a in listing["agents"]] == [
            ("partnered", "serving", revision_of(partnered)),
            ("plain", "serving", revision_of(plain)),
        ]
        assert (missing.status, (await missing.json())["error"]["type"]) == (404, "not_found")
        assert (await answer.json())["output"] == (
            "[test model] you said: serving | prompt: You are a test agent."
        )
        assert [word for word in WORDS if word in secrets] == []
        assert FIRST_KEY in secrets

        # An edit replaces the definition's values; a removal takes them away.
        edited = with_partner("partnered", SECOND_KEY)
        service.write_agent(edited)
        await service.wait_serving("partnered", revision_of(edited))
        assert (FIRST_KEY in secrets, SECOND_KEY in secrets) == (False, True)
        (agents_dir / "partnered.yaml").unlink()
        await service.registry.wait_for(lambda registry: "partnered" not in registry)
        assert (FIRST_KEY in secrets, SECOND_KEY in secrets) == (False, False)


async def test_a_run_of_a_removed_definition_still_masks_its_values() -> None:
    """A run that started before its definition went keeps masking what it owned."""
    shared = SecretValues(["service-key-0123456789"])
    resources = Resources()
    try:
        builder = AgentBuilder(environ={}, secrets=shared, resources=resources)
        agent = builder.build(load_spec(with_partner("partnered", FIRST_KEY)))
    finally:
        await resources.aclose()
    shared.forget("partnered")
    assert agent.secrets is not None
    text = f"{FIRST_KEY} service-key-0123456789 serving"
    assert (shared.mask(text), agent.secrets.mask(text)) == (
        f"{FIRST_KEY} {MASK} serving",
        f"{MASK} {MASK} serving",
    )


def test_protocol_words_are_told_from_credentials() -> None:
    words = [*WORDS, "Bearer", "chat.completion", "text/event-stream", "Not Found", "POST"]
    credentials = ["qk-0123456789", "sk-proj-AbC9", "hunter22", "dXNlcjpwYXNz", "a" * 33]
    assert [value for value in words if not is_protocol_word(value)] == []
    assert [value for value in credentials if is_protocol_word(value)] == []


async def test_a_runs_answer_keeps_its_definitions_masks_after_the_definition_goes() -> None:
    """The answer a run returns (what stored responses keep) is masked like its events,
    by the values its own version owned."""
    shared = SecretValues()
    refused = {  # owns the key; never connects: a loopback address without allow_private
        "type": "http",
        "name": "lookup",
        "url": "http://127.0.0.1:9/lookup",
        "headers": {"Authorization": f"Bearer {FIRST_KEY}"},
        "allow_hosts": ["127.0.0.1"],
    }

    async def leak() -> str:
        """An endpoint that echoes the key back."""
        return f"the key is {FIRST_KEY}"

    tools = ToolRegistry()
    tools.register(Tool.from_function(leak, name="leak"))
    resources = Resources()
    try:
        builder = AgentBuilder(environ={}, secrets=shared, resources=resources, tools=tools)
        spec = load_spec(agent_document("bot", tools=["leak", refused]))
        agent = builder.build(spec)
        shared.forget("bot")
        result = await agent.run("go")  # the offline model calls each tool, then answers
    finally:
        await resources.aclose()
    assert FIRST_KEY not in shared
    assert isinstance(result.output, str)
    assert f"the key is {MASK}" in result.output
    assert FIRST_KEY not in result.output
    assert FIRST_KEY not in repr(result.events)
