"""Any OpenAI-compatible chat completions endpoint, on aiohttp's client (``_endpoint``).

Retries 429, 5xx, timeouts and dropped connections with exponential backoff
(honouring ``Retry-After``), then raises ``ModelError`` (``ModelTimeout`` for a
timeout). The client's own retries are off so that this is the one place that
decides. Every attempt goes through the endpoint's circuit breaker, so a dead
endpoint is left alone after a few failures instead of being hammered.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import openai
import orjson

from dynagent.deadlines import call_deadline
from dynagent.events import Usage
from dynagent.exceptions import ModelError
from dynagent.models._answers import chunk_delta, from_completion, malformed, usage_of
from dynagent.models._endpoint import ModelEndpoint
from dynagent.models._failures import model_error, short, timeout_error
from dynagent.models._http import Answer, ModelAnswer
from dynagent.models._sse import chunk_blocks, whole_body
from dynagent.models.base import ModelRequest, ModelResponse, StreamItem, TextDelta, ToolCallRequest
from dynagent.models.breaker import BreakerPolicy, CircuitBreaker, Permit, endpoint_name
from dynagent.models.cut import note_cut_attempt
from dynagent.runtime._tracing import outgoing_headers
from dynagent.spec.agent import ModelSettings

MAX_BACKOFF = 8.0
BODY_END_WAIT = 1.0
"""Seconds a stream's connection waits for its body's end after ``[DONE]`` to be reused."""
JOIN_OVER = 4
"""Text chunks of one network block above which they are passed on as one delta."""
PAUSE_EVERY = 0.005
"""Seconds a buffered stream is parsed for before the event loop gets a turn."""

T = TypeVar("T")


class ClientPool:
    """One ``ModelEndpoint`` (one connection pool) per endpoint and key, and one
    circuit breaker per endpoint and model.

    Agents are rebuilt on every config change; they share clients and breakers
    from here, so a rebuild never opens new connections nor forgets that an
    endpoint is down. Owned and closed by the service.
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clients: dict[tuple[str, str], ModelEndpoint] = {}
        self._breakers: dict[tuple[str, str], CircuitBreaker] = {}
        self._clock = clock

    def get(self, base_url: str, api_key: str) -> ModelEndpoint:
        key = (base_url, api_key)
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = ModelEndpoint(base_url, api_key)
        return client

    def breaker(self, base_url: str, model: str) -> CircuitBreaker:
        """The circuit breaker of ``model`` at ``base_url``, shared by every agent on it."""
        key = (base_url, model)
        breaker = self._breakers.get(key)
        if breaker is None:
            breaker = CircuitBreaker(endpoint_name(base_url, model), clock=self._clock)
            self._breakers[key] = breaker
        return breaker

    async def aclose(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


@dataclass(frozen=True, slots=True)
class OpenAIModel:
    client: ModelEndpoint = field(repr=False)
    model_name: str
    settings: ModelSettings = field(default_factory=ModelSettings)
    timeout: float = 30.0
    """Seconds per attempt: until the whole answer, or until a stream starts and
    between its chunks."""
    retries: int = 2
    structured_output: bool = True
    backoff: float = 0.25
    """First retry delay in seconds; doubles per attempt, with jitter."""
    breaker: CircuitBreaker | None = field(default=None, repr=False)
    """The endpoint's circuit breaker; None turns it off."""
    breaker_policy: BreakerPolicy = field(default_factory=BreakerPolicy)
    max_chunks: int = 150_000
    """Chunks one streamed answer may hold (``model.max_answer_chunks``)."""
    max_chars: int = 8_000_000
    """Characters of text and tool-call arguments it may hold (``model.max_answer_chars``)."""
    _sent_settings: dict[str, Any] = field(init=False, repr=False, compare=False)
    """``settings`` as sent: dumped once, not on every call."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_sent_settings", self.settings.model_dump(exclude_none=True))

    @property
    def name(self) -> str:
        return self.model_name

    async def request(self, request: ModelRequest) -> ModelResponse:
        response, permit = await self._with_retries(lambda: self._complete(request), request)
        permit.succeeded()
        return response

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamItem]:
        call = partial(self._create, request, stream=True)
        chunks, permit = await self._with_retries(call, request)
        builder = _StreamAccumulator(self.model_name)
        ended = False
        try:
            # A network block of many chunks (a flood: see _sse.py) is one text delta;
            # a few chunks, the usual pace of a model, stay a delta each. A pause every
            # PAUSE_EVERY seconds, so that a long answer already buffered never holds the
            # loop, yet queued deltas can be joined downstream (agent._EventQueue).
            loop = asyncio.get_running_loop()
            paused = loop.time()
            async with aclosing(chunk_blocks(chunks, self.client.request)) as blocks:
                async for block in blocks:
                    texts = [text for text in map(builder.add, block) if text]
                    if builder.chunks > self.max_chunks or builder.size > self.max_chars:
                        raise _too_long(builder, self.max_chunks, self.max_chars)
                    if len(texts) > JOIN_OVER:
                        texts = ["".join(texts)]
                    for text in texts:
                        yield TextDelta(text)
                    if loop.time() - paused > PAUSE_EVERY:
                        await asyncio.sleep(0)
                        paused = loop.time()
            ended = True
            response = builder.response()
            permit.succeeded()
        except openai.APIError as exc:
            raise permit.settle(model_error(exc, self.timeout)) from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            error = ModelError(f"malformed stream from the model endpoint: {exc}")
            raise permit.settle(error) from exc
        except ModelError as exc:
            permit.settle(exc)
            raise
        finally:
            permit.release()  # a stream its reader dropped says nothing about the endpoint
            _done(chunks, ended=ended)
        yield response

    async def _complete(self, request: ModelRequest) -> ModelResponse:
        # Read as it arrives, like a stream, so that an endless body is refused at its
        # limit instead of held whole; JSON escapes take at most 6 bytes a character.
        answer = await self._create(request, stream=False)
        try:
            body = await whole_body(answer, 6 * self.max_chars + (1 << 20), self.client.request)
        finally:
            _done(answer)
        kind = answer.headers.get("content-type", "")
        if "json" not in kind.lower():
            raise malformed(f"not a chat completion (Content-Type {short(kind, 60)!r})")
        return from_completion(orjson.loads(body), self.model_name)

    async def _create(self, request: ModelRequest, *, stream: bool) -> ModelAnswer:
        kwargs: dict[str, Any] = {**self._sent_settings, **request.settings}
        if request.tool_choice is not None and request.tools:
            kwargs["tool_choice"] = request.tool_choice
        if request.tools:
            kwargs["tools"] = [tool.to_openai() for tool in request.tools]
            kwargs["parallel_tool_calls"] = request.parallel_tool_calls
        if request.output_schema is not None and self.structured_output:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": request.output_schema},
            }
        if stream:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        # The body is read here as it arrives, whole answers too (_sse.py).
        # A whole answer is read under the call's deadline (``_attempt``); a stream's
        # reads after its headers have only the client's per-read timeout.
        return await self.client.post(
            {"model": self.model_name, "messages": list(request.messages), **kwargs},
            self.timeout if stream else None,
            outgoing_headers(),
        )

    async def _with_retries(
        self, call: Callable[[], Awaitable[T]], request: ModelRequest
    ) -> tuple[T, Permit]:
        """The result of the first attempt that succeeds, with its (unsettled) permit."""
        attempt = 0
        while True:
            try:
                return await self._attempt(call, request)
            except ModelError as error:
                if not error.retryable or attempt >= self.retries:
                    raise
                if self.breaker is not None and self.breaker.state(self.breaker_policy) != "closed":
                    raise self.breaker.rejection(self.breaker_policy) from error
                await asyncio.sleep(_delay(error.__cause__, self.backoff, attempt))
                attempt += 1

    async def _attempt(
        self, call: Callable[[], Awaitable[T]], request: ModelRequest
    ) -> tuple[T, Permit]:
        """One call through the breaker; a failure is recorded and raised as ``ModelError``;
        one cut off at its deadline is counted in its run (``models.cut``)."""
        permit = self.breaker.admit(self.breaker_policy) if self.breaker else Permit.unguarded()
        try:
            # The client's timeout bounds each read; this bounds the whole answer, so an
            # endpoint that trickles bytes cannot hold a call past ``timeout`` either; on
            # the timer of the run it is part of (``deadlines``).
            async with call_deadline(self.timeout):
                return await call(), permit
        except TimeoutError as exc:
            note_cut_attempt(self.model_name, request)
            raise permit.settle(timeout_error(self.timeout)) from exc
        except openai.APIError as exc:
            raise permit.settle(model_error(exc, self.timeout)) from exc
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            error = ModelError(f"malformed response from the model endpoint: {exc}")
            raise permit.settle(error) from exc
        except ModelError as exc:
            permit.settle(exc)
            raise
        except BaseException:
            permit.release()
            raise


def _done(response: ModelAnswer, *, ended: bool = False) -> None:
    """Its connection back to the pool when the body was read to its end (for a stream
    read to its ``[DONE]``, ``ended``: once the body's end arrives), else closed."""
    if response.content.at_eof():
        response.release()
    elif ended and isinstance(response, Answer):
        response.release_at_end(BODY_END_WAIT)
    else:
        response.close()


def _delay(exc: BaseException | None, backoff: float, attempt: int) -> float:
    headers = exc.response.headers if isinstance(exc, openai.APIStatusError) else None
    if headers is not None:
        for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
            value = headers.get(name)
            if value is not None:
                try:
                    return min(float(value) * scale, MAX_BACKOFF)
                except ValueError:
                    break
    base: float = min(backoff * 2.0**attempt, MAX_BACKOFF)
    return base * random.uniform(0.75, 1.25)


def _too_long(builder: _StreamAccumulator, max_chunks: int, max_chars: int) -> ModelError:
    if builder.chunks > max_chunks:
        return ModelError(f"the model's answer went past {max_chunks} chunks (max_answer_chunks)")
    return ModelError(f"the model's answer went past {max_chars} characters (max_answer_chars)")


class _StreamAccumulator:
    """Folds streamed chunks (text and tool-call deltas, as parsed JSON) into one response."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.calls: dict[int, tuple[str, list[str], list[str]]] = {}
        """Per call index: its id and the pieces of its name and arguments."""
        self.usage = Usage()
        self.chunks = 0
        self.size = 0
        """Characters of text and tool-call arguments so far."""
        self.choices = 0
        """Chunks that carried a choice: a stream without one holds no answer at all."""

    def add(self, chunk: Any) -> str:
        """Fold one chunk in; its text, or ''. Called once per chunk of every stream: a
        flood's 150,000 make every lookup here count."""
        self.chunks += 1
        delta = chunk_delta(chunk)
        usage = chunk.get("usage")
        if usage:
            self.usage = usage_of(usage)
        model = chunk.get("model")
        if model and model != self.model and isinstance(model, str):
            self.model = model
        if delta is None:
            return ""
        self.choices += 1
        for call in delta.get("tool_calls") or ():
            # Lists, not ``+=`` on strings: arguments streamed in 30,000 pieces would be
            # copied 30,000 times (a hostile model's quadratic answer).
            slot = self.calls.setdefault(call["index"], ("", [], []))
            if call.get("id"):
                slot = self.calls[call["index"]] = (call["id"], slot[1], slot[2])
            function = call.get("function")
            if function is not None:
                slot[1].append(function.get("name") or "")
                slot[2].append(arguments := function.get("arguments") or "")
                self.size += len(arguments)
        content: str | None = delta.get("content")  # text or None: chunk_delta checked
        if content:
            self.size += len(content)
            self.text.append(content)
            return content
        return ""

    def response(self) -> ModelResponse:
        if not self.choices:
            raise malformed("the stream held no answer (not a chat completions stream?)")
        calls = tuple(
            ToolCallRequest(call_id or f"call_{index}", "".join(name), "".join(args) or "{}")
            for index, (call_id, name, args) in sorted(self.calls.items())
        )
        if any(not call.name for call in calls):
            raise ModelError("malformed stream: a tool call without a name")
        content = "".join(self.text) if self.text or not calls else None
        return ModelResponse(content, calls, self.usage, self.model)
