"""The OpenAI Responses API: ``POST /v1/responses`` (reading and deleting a stored
response: ``responses_kept.py``).

It runs agents through the same run path as chat completions (``runs.py``) and
answers with the same text (``openai_answer``); only the wire shapes differ.
Streaming sends OpenAI's typed events, each with its ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from dynagent.core.response_store import StoredResponse, new_response_id
from dynagent.core.routing import RunRequest, split_model_name
from dynagent.events import ErrorEvent, Event, RunFinished, Usage
from dynagent.exceptions import ErrorKind
from dynagent.http._routes import ROUTING, RUN_ERRORS, SERVED_BY, SSE, Route, Routes
from dynagent.http.api.bodies import read_body
from dynagent.http.middleware.errors import STATUS, openai_error_body
from dynagent.http.openai.answer import AnswerText
from dynagent.http.openai.chat import IGNORED, answer_of, headers_of
from dynagent.http.openai.options import responses_run
from dynagent.http.openai.responses_items import (
    assistant_message,
    call_item,
    input_messages,
    message_item,
    output_items,
    response_body,
)
from dynagent.http.openai.schemas import OpenAIError, ResponseObject, ResponsesRequest
from dynagent.http.runs import pinned_variant, run_agent, stream_agent
from dynagent.http.sse import SSE_HEADERS, EventStream, event, json, open_stream
from dynagent.http.state import caller, service
from dynagent.models.base import Message

routes = Routes("openai", error_body=OpenAIError)

_Final = tuple[str, list[dict[str, str]], dict[str, Any]]
"""A finished response: its text, its client tool calls and the response object."""


async def _conversation(request: web.Request, body: ResponsesRequest) -> tuple[list[Message], int]:
    """The run's input messages, and how many lead them that are not the conversation
    (``instructions`` do not carry over to a continuation, as in OpenAI's API)."""
    history: list[Message] = []
    if body.previous_response_id is not None:
        previous = await service(request).responses.find(body.previous_response_id, caller(request))
        history = list(previous.messages)
    lead = [{"role": "system", "content": body.instructions}] if body.instructions else []
    return [*lead, *history, *input_messages(body.input)], len(lead)


async def _keep(
    request: web.Request, body: ResponsesRequest, run: RunRequest, lead: int, final: _Final
) -> None:
    """Store the response and its conversation (``store: true``, the default)."""
    text, calls, response = final
    if not body.store or isinstance(run.input, str):
        return
    messages = (*run.input[lead:], assistant_message(text, calls))
    owner = caller(request).principal
    await service(request).responses.keep(StoredResponse(response, messages, owner, run.name))


@routes.add(
    Route(
        "POST",
        "/v1/responses",
        "OpenAI Responses API",
        runs=True,
        parameters=ROUTING,
        request=ResponsesRequest,
        response=ResponseObject,
        description="The answer, or its stream of events with stream: true",
        streams=(SSE,),
        headers={**SERVED_BY, **IGNORED},
        errors=RUN_ERRORS,
    )
)
async def create_response(request: web.Request) -> web.StreamResponse:
    body = await read_body(request, ResponsesRequest)
    name, variant_in_name = split_model_name(body.model)
    messages, lead = await _conversation(request, body)
    run = await responses_run(body, name, pinned_variant(request, variant_in_name), messages)
    if body.stream:
        return await _streamed(request, body, run, lead)
    agent, result = await run_agent(request, run)
    answer = answer_of(agent, run)
    text = answer.text(result.events)
    calls = answer.client_calls()
    response_id = new_response_id()
    output = output_items(response_id, text, calls)
    response = response_body(
        response_id, body, status="completed", output=output, usage=result.usage
    )
    await _keep(request, body, run, lead, (text, calls, response))
    headers = headers_of(agent, result.variant, result.trace_id, body, run)
    return json(ResponseObject.model_validate(response), headers=headers, compact=True)


async def _streamed(
    request: web.Request, body: ResponsesRequest, run: RunRequest, lead: int
) -> web.StreamResponse:
    agent, variant, trace_id, events = await stream_agent(request, run, hold=True)
    headers = {**SSE_HEADERS, **headers_of(agent, variant, trace_id, body, run)}
    response = await open_stream(request, headers, first_event_ready=True)
    writer = _EventWriter(new_response_id(), body, answer_of(agent, run))
    stream = EventStream(response)
    async for name, data, last in writer.events(events):
        await stream.write(event(name, data), held=last)
    if writer.final is not None:  # stored before response.completed reaches the caller
        await _keep(request, body, run, lead, writer.final)
    await stream.end()
    return response


class _EventWriter:
    """Turns a run's events into the Responses API's typed streaming events."""

    def __init__(self, response_id: str, body: ResponsesRequest, answer: AnswerText) -> None:
        self.response_id = response_id
        self.body = body
        self.answer = answer
        self.sequence = 0
        self.text: list[str] = []
        self.final: _Final | None = None
        """(text, client calls, response) once the run completed."""

    def _event(self, kind: str, **data: Any) -> tuple[str, dict[str, Any]]:
        payload = {"type": kind, "sequence_number": self.sequence, **data}
        self.sequence += 1
        return kind, payload

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        return response_body(self.response_id, self.body, status=status, **fields)

    async def events(
        self, run: AsyncIterator[Event]
    ) -> AsyncIterator[tuple[str, dict[str, Any], bool]]:
        """The typed events, each with whether ``EventStream`` holds it: one of the
        answer's last, or made together with the next."""
        started = self._response("in_progress", output=[])
        yield *self._event("response.created", response=started), False
        yield *self._event("response.in_progress", response=started), False
        async for item in run:
            piece = self.answer.feed(item)
            if piece:  # the item and part opened with the first words leave with them
                *opened, delta = self._text_delta(piece)
                for out in opened:
                    yield *out, True
                yield *delta, False
            elif isinstance(item, ErrorEvent):
                kind: ErrorKind = item.error_type  # type: ignore[assignment]
                detail = openai_error_body(kind, item.message, STATUS.get(kind, 502))["error"]
                error = {"code": detail["code"], "message": detail["message"]}
                output = self._message_done() if self.text else []
                failed = self._response("failed", output=output, error=error)
                yield *self._event("response.failed", response=failed), True
                async for _ in run:  # run_finished: the run is recorded before the answer ends
                    pass
                return
            elif isinstance(item, RunFinished):
                for out in self._finish(item.usage):
                    yield *out, True

    @property
    def _item_id(self) -> str:
        return f"msg_{self.response_id}"

    def _text_delta(self, piece: str) -> list[tuple[str, dict[str, Any]]]:
        out = []
        if not self.text:
            out.append(
                self._event(
                    "response.output_item.added",
                    output_index=0,
                    item=message_item(self._item_id, "", status="in_progress"),
                )
            )
            out.append(self._event("response.content_part.added", **self._part("")))
        self.text.append(piece)
        out.append(
            self._event(
                "response.output_text.delta",
                item_id=self._item_id,
                output_index=0,
                content_index=0,
                delta=piece,
                logprobs=[],
            )
        )
        return out

    def _part(self, text: str) -> dict[str, Any]:
        part = {"type": "output_text", "text": text, "annotations": []}
        return {"item_id": self._item_id, "output_index": 0, "content_index": 0, "part": part}

    def _message_done(self) -> list[dict[str, Any]]:
        return [message_item(self._item_id, "".join(self.text))]

    def _finish(self, usage: Usage) -> list[tuple[str, dict[str, Any]]]:
        out = []
        text = "".join(self.text)
        calls = self.answer.client_calls()
        if text or not calls:
            if not text:  # an empty answer still has its message item
                out.extend(self._text_delta("")[:2])
            out.append(
                self._event(
                    "response.output_text.done",
                    item_id=self._item_id,
                    output_index=0,
                    content_index=0,
                    text=text,
                    logprobs=[],
                )
            )
            out.append(self._event("response.content_part.done", **self._part(text)))
            item = message_item(self._item_id, text)
            out.append(self._event("response.output_item.done", output_index=0, item=item))
        first = 1 if text or not calls else 0
        for index, call in enumerate(calls, start=first):
            out.extend(self._call_events(index, f"fc_{self.response_id}_{index - first}", call))
        output = output_items(self.response_id, text, calls)
        response = self._response("completed", output=output, usage=usage)
        out.append(self._event("response.completed", response=response))
        self.final = (text, calls, response)
        return out

    def _call_events(
        self, index: int, item_id: str, call: dict[str, str]
    ) -> list[tuple[str, dict[str, Any]]]:
        arguments = call["arguments"]
        where = {"item_id": item_id, "output_index": index}
        return [
            self._event(
                "response.output_item.added",
                output_index=index,
                item=call_item(item_id, call, status="in_progress"),
            ),
            self._event("response.function_call_arguments.delta", **where, delta=arguments),
            self._event(
                "response.function_call_arguments.done",
                **where,
                name=call["name"],
                arguments=arguments,
            ),
            self._event(
                "response.output_item.done", output_index=index, item=call_item(item_id, call)
            ),
        ]
