"""``bench._floor``: each floor answers what the scripted model said, whole and streamed,
whatever client it calls the model with."""

from __future__ import annotations

import json

import aiohttp
import pytest

from bench._process import Child
from bench.scenarios import REPLY_TEXT


@pytest.mark.parametrize("kind", ["raw", "connections"])
async def test_a_floor_relays_the_models_answer(kind: str) -> None:
    async with (
        Child("bench._model_server") as model,
        Child("bench._floor", model.ready["base_url"], kind) as floor,
        aiohttp.ClientSession() as http,
    ):
        answers = []
        for _ in range(3):  # the second and third on kept-alive model connections
            async with http.post(floor.ready["url"] + "/invoke", json={"input": "ping"}) as whole:
                answers.append((await whole.json())["output"])
            async with http.post(floor.ready["url"] + "/stream", json={"input": "ping"}) as stream:
                events = [line async for line in stream.content if line.startswith(b"data: {")]
            answers.append("".join(json.loads(line[6:])["text"] for line in events))
    assert answers == [REPLY_TEXT] * 6
