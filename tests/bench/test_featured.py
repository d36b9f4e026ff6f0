"""``bench._featured``: the floor with the least of each feature serves the service's
``invoke`` answer for the bench's scripted model."""

from __future__ import annotations

import aiohttp

from bench._process import Child
from bench.scenarios import REPLY_TEXT


async def test_the_featured_floor_answers_as_the_service_does() -> None:
    async with (
        Child("bench._model_server") as model,
        Child("bench._featured", model.ready["base_url"]) as floor,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(floor.ready["url"] + "/invoke", json={"input": "ping"}) as response:
            status, body = response.status, await response.json()
        async with http.post(floor.ready["url"] + "/invoke", json={"input": ""}) as refused:
            refused_status = refused.status

    assert status == 200
    assert (body["output"], body["agent"], body["variant"], body["steps"]) == (
        REPLY_TEXT,
        "reply",
        "stable",
        1,
    )
    assert len(body["trace_id"]) == 32
    assert body["usage"]["total_tokens"] > 0
    assert refused_status == 400  # validated by the service's request model
