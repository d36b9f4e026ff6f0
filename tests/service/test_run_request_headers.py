"""The run a route hands the core carries every field the route set, plus the caller's
canary key and trace context from its headers."""

from __future__ import annotations

import dataclasses

from aiohttp.test_utils import make_mocked_request
from multidict import CIMultiDict

from dynagent.core.routing import RunRequest
from dynagent.http.runs import with_headers
from dynagent.http.state import CANARY_KEY_HEADER
from dynagent.runtime.options import RunOptions


def test_every_field_of_the_run_is_kept_and_the_headers_are_added() -> None:
    run = RunRequest(
        name="bot",
        input=[{"role": "user", "content": "hi"}],
        session_id="s1",
        variables={"tone": "dry"},
        pin="canary",
        endpoint="chat_completions",
        options=RunOptions(()),
        sticky="user-7",
        canary_key="old",
        carrier={"traceparent": "old"},
        metadata={"team": "a"},
    )
    headers = CIMultiDict({CANARY_KEY_HEADER: "key-9", "traceparent": "00-abc-def-01"})
    request = make_mocked_request("POST", "/v1/agents/bot/invoke", headers=headers)

    got = with_headers(request, run)

    expected = dataclasses.replace(run, canary_key="key-9", carrier=request.headers)
    assert got == expected
    # every field differs from its default here, so a field added to RunRequest and not
    # carried over shows as a difference above
    defaults = RunRequest("", "", None, {}, None, "")
    assert all(
        getattr(run, f.name) != getattr(defaults, f.name) for f in dataclasses.fields(RunRequest)
    )
