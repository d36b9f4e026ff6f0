"""LiteLLM against the service (as an ``openai/…`` model): ``completion``, streaming, an
input too long for the model as its ``ContextWindowExceededError``, and
a model failure that reaches the caller as 502 — on a stream too, before its first byte."""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download at import

import litellm
import pytest

from tests.openai.conftest import API_KEY, Served
from tests.support import CallTools, Fail, Reply, Step

USER = [{"role": "user", "content": "Hi!"}]


def call(service: Served, **options: Any) -> Any:
    return litellm.completion(
        model="openai/tooled",
        api_base=service.v1,
        api_key=API_KEY,
        messages=USER,
        num_retries=0,
        **options,
    )


def test_completion(service: Served) -> None:
    service.script([Reply("Hello from LiteLLM.")])
    response = call(service)
    choice = response.choices[0]
    assert (choice.message.content, choice.finish_reason) == ("Hello from LiteLLM.", "stop")
    assert response.usage.total_tokens > 0


def test_streaming_equals_the_whole_answer(service: Served) -> None:
    steps: list[Step] = [
        CallTools([("calculator", {"expression": "1+1"})], text="Adding."),
        Reply("2."),
    ]
    service.script([*steps, *steps])
    whole = call(service).choices[0].message.content
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in call(service, stream=True))
    assert (whole, streamed) == ("Adding.\n\n2.", "Adding.\n\n2.")


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_failure_is_a_502(service: Served, stream: bool) -> None:
    service.script([Fail(400)])
    with pytest.raises(litellm.BadGatewayError) as caught:
        response = call(service, stream=stream)
        if stream:
            list(response)
    assert caught.value.status_code == 502


@pytest.mark.parametrize("stream", [False, True])
def test_an_input_too_long_for_the_model_is_litellms_context_window_error(
    service: Served, stream: bool
) -> None:
    """LiteLLM's own exception for it, which its callers catch to trim their messages."""
    too_long = {
        "error": {
            "message": "This model's maximum context length is 8192 tokens.",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    service.script([Fail(400, too_long)])
    with pytest.raises(litellm.ContextWindowExceededError) as caught:
        response = call(service, stream=stream)
        if stream:
            list(response)
    assert caught.value.status_code == 400
