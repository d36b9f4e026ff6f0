"""A scripted OpenAI-compatible model server, reached through the real ``openai`` client.

Each model name has a script: a list of steps consumed one per request, in
order. A request the script did not foresee is answered with HTTP 500 and
recorded as an error; ``assert_complete()`` fails when steps were left over,
like openai-agents' ``ScriptedModel.assert_complete()``. Every request body is
kept in ``requests`` so a test can assert on exactly what the model saw.

    server.script("gpt-main", [CallTools([("calculator", {"expression": "2+2"})]), Reply("4")])
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ._wire import (
    Body,
    WireAnswer,
    WireCall,
    chunks,
    completion,
    error_body,
    estimate_tokens,
    protocol_problem,
    split_text,
    sse,
)

Expectation = Callable[[Body], object]
"""Called with the request body before the step answers; raise ``AssertionError`` to refuse it."""


@dataclass(frozen=True, slots=True)
class Reply:
    """Answer with text (or text computed from the request body)."""

    text: str | Callable[[Body], str]
    expect: Expectation | None = field(default=None, kw_only=True)
    pieces: Sequence[str] | None = field(default=None, kw_only=True)
    """Streamed deltas; by default the text is split into words."""
    gap: float = field(default=0.0, kw_only=True)
    """Seconds between two streamed chunks: a model writing at a human's reading pace
    (deltas closer together than the service's delta window reach callers joined)."""
    pause: asyncio.Event | None = field(default=None, kw_only=True)
    """Streaming: after the first piece, wait until the test sets this (or the server
    stops) before the rest: an answer kept half-written until the caller has seen its start."""


@dataclass(frozen=True, slots=True)
class CallTools:
    """Ask for tool calls: ``(name, arguments)``; a ``str`` argument goes out as raw text."""

    calls: Sequence[tuple[str, Mapping[str, Any] | str]]
    text: str | None = None
    expect: Expectation | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class Fail:
    """Answer with an HTTP error (``{"error": …}`` body unless ``body`` is given)."""

    status: int
    body: Any = None
    headers: Mapping[str, str] | None = None
    expect: Expectation | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class Slow:
    """Wait ``seconds`` (cut short when the server stops), then answer with ``then``."""

    seconds: float
    then: Step


@dataclass(frozen=True, slots=True)
class Held:
    """Wait until the test sets ``released`` (503 if the server stops first), then answer
    with ``then``: a call kept in flight for exactly as long as the test needs."""

    released: asyncio.Event
    then: Step


@dataclass(frozen=True, slots=True)
class Malformed:
    """Send ``raw_text`` as the body: broken JSON, or a broken SSE stream when streaming."""

    raw_text: str
    content_type: str | None = None
    """Defaults to ``application/json``, or ``text/event-stream`` for a streaming request."""
    expect: Expectation | None = field(default=None, kw_only=True)


@dataclass(frozen=True, slots=True)
class BrokenStream:
    """Stream the first deltas of ``text``, then drop the connection without ``[DONE]``."""

    text: str
    expect: Expectation | None = field(default=None, kw_only=True)


Step = Reply | CallTools | Fail | Slow | Held | Malformed | BrokenStream


@dataclass
class _Script:
    steps: list[Step]
    cycle: bool = False
    position: int = 0

    def next(self) -> Step | None:
        if self.cycle:
            step = self.steps[self.position % len(self.steps)]
        elif self.position < len(self.steps):
            step = self.steps[self.position]
        else:
            return None
        self.position += 1
        return step

    def left_over(self) -> list[Step]:
        if self.cycle:
            done = self.position % len(self.steps)
            return self.steps[done:] if done else []
        return self.steps[self.position :]


class ScriptedModelServer:
    """``POST /v1/chat/completions`` (JSON and SSE) and ``GET /v1/models`` on loopback."""

    def __init__(self) -> None:
        self.requests: list[Body] = []
        """Every chat completions body received, in arrival order."""
        self.traceparents: list[str | None] = []
        """The W3C ``traceparent`` header of each of those requests (None: none sent)."""
        self.errors: list[str] = []
        """Requests the scripts did not foresee or refused; the fixture fails the test on any."""
        self._scripts: dict[str, _Script] = {}
        self._ids = itertools.count(1)
        self._stopping = asyncio.Event()
        self._arrived = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        """``http://127.0.0.1:<port>/v1`` once started."""

    # -- scripting -------------------------------------------------------------------------

    def script(self, model: str, steps: Sequence[Step], *, cycle: bool = False) -> None:
        """Queue ``steps`` for ``model`` (after any not yet consumed).

        ``cycle=True`` replays the steps forever, for benchmarks; such a script is
        complete whenever it stands at the start of a cycle.
        """
        if not steps:
            raise ValueError("a script needs at least one step")
        current = self._scripts.get(model)
        if cycle or current is None or current.cycle:
            self._scripts[model] = _Script(list(steps), cycle=cycle)
        else:
            current.steps.extend(steps)

    def end_cycle(self, model: str) -> None:
        """Stop replaying ``model``'s cycling script where it stands (a load stopped in the
        middle of a cycle): it is complete, and a further request for it is unforeseen."""
        current = self._scripts.get(model)
        if current is None or not current.cycle:
            raise ValueError(f"{model!r} has no cycling script")
        self._scripts[model] = _Script([], position=0)

    def requests_for(self, model: str) -> list[Body]:
        return [body for body in self.requests if body.get("model") == model]

    async def wait_for_requests(self, count: int) -> None:
        """Return once ``count`` chat completions requests have arrived."""
        async with self._arrived:
            await self._arrived.wait_for(lambda: len(self.requests) >= count)

    def assert_complete(self) -> None:
        """Raise when a scripted step was never requested."""
        left = {model: s.left_over() for model, s in self._scripts.items() if s.left_over()}
        if left:
            raise AssertionError(f"scripted model steps never requested: {left}")

    def assert_no_errors(self) -> None:
        if self.errors:
            raise AssertionError("scripted model server errors:\n" + "\n".join(self.errors))

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> ScriptedModelServer:
        # Big enough for the hostile-input runs: a 1 MB answer sent back with its retry.
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    @property
    def address(self) -> str:
        """``host:port`` of the server, as errors about its connections name it."""
        return self.base_url.split("//", 1)[1].split("/", 1)[0]

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> ScriptedModelServer:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- handlers ----------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "scripted"}
            for name in self._scripts
        ]
        return web.json_response({"object": "list", "data": data})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body: Any = json.loads(await request.read())
        except ValueError:
            return self._refuse(400, "the request body is not JSON")
        if not request.headers.get("Authorization", "").startswith("Bearer "):
            return self._refuse(401, "no 'Authorization: Bearer …' header")
        problem = protocol_problem(body)
        if problem is not None:
            self.requests.append(body if isinstance(body, dict) else {"body": body})
            return self._refuse(400, f"request #{len(self.requests)}: {problem}")
        self.requests.append(body)
        self.traceparents.append(request.headers.get("traceparent"))
        number = len(self.requests)
        async with self._arrived:
            self._arrived.notify_all()
        script = self._scripts.get(body["model"])
        step = script.next() if script is not None else None
        if step is None:
            return self._refuse(
                500,
                f"request #{number} for model {body['model']!r} is beyond its script "
                f"(scripted models: {sorted(self._scripts)})",
            )
        return await self._answer(request, body, step, number)

    async def _answer(
        self, request: web.Request, body: Body, step: Step, number: int
    ) -> web.StreamResponse:
        if isinstance(step, Slow):
            try:
                await asyncio.wait_for(self._stopping.wait(), step.seconds)
            except TimeoutError:
                return await self._answer(request, body, step.then, number)
            return web.json_response(error_body("server stopping", "server_error"), status=503)
        if isinstance(step, Held):
            return await self._held(request, body, step, number)
        if step.expect is not None:
            try:
                step.expect(body)
            except Exception as exc:
                return self._refuse(400, f"request #{number}: expectation failed: {exc!r}")
        streaming = bool(body.get("stream"))
        if isinstance(step, Fail):
            return _failure(step)
        if isinstance(step, Malformed):
            default = "text/event-stream" if streaming else "application/json"
            return web.Response(text=step.raw_text, content_type=step.content_type or default)
        answer = self._wire_answer(body, step, number)
        if isinstance(step, BrokenStream):
            return await _broken_stream(request, answer)
        if not streaming:
            return web.json_response(completion(answer))
        options = body.get("stream_options") or {}
        gap = step.gap if isinstance(step, Reply) else 0.0
        pause = step.pause if isinstance(step, Reply) else None
        return await _stream(
            request,
            answer,
            include_usage=bool(options.get("include_usage")),
            gap=gap,
            pause=(pause, self._stopping) if pause is not None else (),
        )

    async def _held(
        self, request: web.Request, body: Body, step: Held, number: int
    ) -> web.StreamResponse:
        waits = [asyncio.ensure_future(e.wait()) for e in (step.released, self._stopping)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if not step.released.is_set():
            return web.json_response(error_body("server stopping", "server_error"), status=503)
        return await self._answer(request, body, step.then, number)

    def _wire_answer(
        self, body: Body, step: Reply | CallTools | BrokenStream, number: int
    ) -> WireAnswer:
        calls: tuple[WireCall, ...] = ()
        if isinstance(step, CallTools):
            content = step.text
            calls = tuple(
                WireCall(f"call_{number}_{i}", name, _arguments(arguments))
                for i, (name, arguments) in enumerate(step.calls)
            )
        elif isinstance(step, Reply):
            content = step.text(body) if callable(step.text) else step.text
        else:
            content = step.text
        pieces = step.pieces if isinstance(step, Reply) and step.pieces is not None else None
        produced = (content or "") + "".join(c.arguments for c in calls)
        return WireAnswer(
            completion_id=f"chatcmpl-scripted-{next(self._ids)}",
            model=body["model"],
            content=content,
            calls=calls,
            prompt_tokens=estimate_tokens(body["messages"]),
            completion_tokens=estimate_tokens(produced),
            pieces=tuple(pieces) if pieces is not None else split_text(content or ""),
        )

    def _refuse(self, status: int, message: str) -> web.Response:
        self.errors.append(f"HTTP {status}: {message}")
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return web.json_response(error_body(f"scripted model: {message}", kind), status=status)


def _arguments(arguments: Mapping[str, Any] | str) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(dict(arguments))


def _failure(step: Fail) -> web.Response:
    body = step.body
    if body is None:
        kind = "rate_limit_error" if step.status == 429 else "server_error"
        body = error_body(f"scripted failure {step.status}", kind)
    text = body if isinstance(body, str) else json.dumps(body)
    return web.Response(
        text=text,
        status=step.status,
        headers=dict(step.headers or {}),
        content_type="application/json",
    )


async def _either(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def _stream(
    request: web.Request,
    answer: WireAnswer,
    *,
    include_usage: bool,
    gap: float = 0.0,
    pause: Sequence[asyncio.Event] = (),
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for number, chunk in enumerate(chunks(answer, include_usage=include_usage)):
        if gap and number > 1:  # the role chunk and the first text go out together
            await asyncio.sleep(gap)  # the model's pace, not a wait for the service
        if pause and number == 2:  # the role chunk and the first piece are out
            await _either(*pause)
        await response.write(sse(chunk))
    await response.write(sse("[DONE]"))
    await response.write_eof()
    return response


async def _broken_stream(request: web.Request, answer: WireAnswer) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for chunk in itertools.islice(chunks(answer, include_usage=False), 2):
        await response.write(sse(chunk))
    if request.transport is not None:
        request.transport.abort()
    return response
