"""The ReAct loop: call the model, run the tools it asked for, repeat.

Kept apart from ``Agent`` so the loop reads top to bottom in small steps.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Protocol

import jsonschema

from dynagent.events import (
    STEP_SEPARATOR,
    FinalOutput,
    JsonValue,
    ModelRequestEvent,
    ToolCallEvent,
    ToolResultEvent,
    Usage,
)
from dynagent.exceptions import (
    BadRequest,
    MaxStepsExceeded,
    OutputValidationError,
    RunError,
    ToolFailed,
    ToolTimeout,
)
from dynagent.interceptors.base import InterceptorChain, RunContext, ToolOutcome
from dynagent.models.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
    ToolDefinition,
)
from dynagent.models.cut import CUT_ATTEMPTS, prompt_size, tools_size
from dynagent.models.prices import Prices, priced_name
from dynagent.runtime._calls import StreamedCall, count_cut, response_event, take_cut_attempts
from dynagent.runtime._costs import CostMeter
from dynagent.runtime._helpers import all_or_none, off_loop, parsed_arguments, tool_error
from dynagent.runtime._schema_pair import joined, unfenced
from dynagent.runtime._tracing import within
from dynagent.runtime.options import RunOptions
from dynagent.sessions.base import SessionStore
from dynagent.spec._schemas import Validator, validator
from dynagent.spec._templates import MissingVariable, render
from dynagent.spec.agent import AgentSpec
from dynagent.tools.base import Tool

AgentInput = str | Sequence[Message]
"""What a run is given: one user message as text, or whole messages."""


class Agent(Protocol):
    """What the loop reads of an agent (``dynagent.agent.Agent`` is the one there is);
    a protocol, so that the loop does not import the module that calls it."""

    @property
    def spec(self) -> AgentSpec: ...
    @property
    def model(self) -> Model: ...
    @property
    def tools(self) -> Mapping[str, Tool]: ...
    @property
    def chain(self) -> InterceptorChain: ...
    @property
    def system_prompt(self) -> str | None: ...
    @property
    def sessions(self) -> SessionStore | None: ...
    @property
    def name(self) -> str: ...
    @property
    def prices(self) -> Prices: ...
    @property
    def definitions(self) -> tuple[ToolDefinition, ...]: ...
    @property
    def definition_chars(self) -> int: ...
    @property
    def output_validator(self) -> Validator | None: ...


async def execute_run(
    agent: Agent,
    ctx: RunContext,
    input: AgentInput,
    *,
    stream: bool,
    options: RunOptions | None = None,
) -> tuple[JsonValue, Usage, int]:
    """Run the loop; returns (output, usage, model calls)."""
    new_messages = input_messages(input)
    options = options or RunOptions()
    key = ctx.session_key or ctx.session_id
    if agent.sessions is None or key is None:
        return await _Loop(agent, ctx, stream, options).run(
            system_messages(agent, ctx), [], new_messages
        )
    async with agent.sessions.lock(key):
        history = await agent.sessions.load(key)
        loop = _Loop(agent, ctx, stream, options)
        result = await loop.run(system_messages(agent, ctx), history, new_messages)
        await agent.sessions.append(key, loop.produced)
        return result


async def go_on(
    agent: Agent,
    ctx: RunContext,
    messages: list[Message],
    answered: ModelResponse,
    options: RunOptions | None,
    *,
    stream: bool = False,
) -> tuple[JsonValue, Usage, int]:
    """The rest of a run whose first model call, on ``messages``, was ``answered``."""
    loop = _Loop(agent, ctx, stream, options or RunOptions())
    return await loop.run([], [], messages, answered=answered)


def input_messages(input: AgentInput) -> list[Message]:
    if isinstance(input, str):
        return [{"role": "user", "content": input}]
    return [dict(m) for m in input]


def system_messages(agent: Agent, ctx: RunContext) -> list[Message]:
    return [{"role": "system", "content": ctx.system}] if ctx.system else []


def render_system(agent: Agent, variables: dict[str, str]) -> str | None:
    """The agent's system prompt for these variables; ``BadRequest`` if one is missing."""
    if not agent.system_prompt:
        return None
    try:
        return render(agent.system_prompt, variables)
    except MissingVariable as exc:
        raise BadRequest(
            f"the prompt of agent {agent.name!r} needs variable {exc.name!r}; "
            "pass it in 'variables'"
        ) from None


class _Loop:
    def __init__(self, agent: Agent, ctx: RunContext, stream: bool, options: RunOptions) -> None:
        self.agent = agent
        self.ctx = ctx
        self.stream = stream
        self.options = options
        self.produced: list[Message] = []
        """Input and answers of this run, in order: what a session keeps."""
        output = agent.spec.output
        own_schema = output.schema_ if output else None
        self.schema = joined(own_schema, options.output_schema)
        if self.schema is None or self.schema is own_schema:  # built with the agent
            self.validator: Validator | None = agent.output_validator
        else:  # a caller's: built for this run
            self.validator = validator(self.schema)
        self.output_retries = output.retries if output else options.output_retries
        client = options.client_tools
        self.definitions = (*agent.definitions, *client) if client else agent.definitions
        self.definition_chars = agent.definition_chars + (tools_size(client) if client else 0)
        self.client_names = options.client_names
        limit = agent.spec.limits.max_cost_usd
        self.meter = CostMeter(agent.prices, priced_name(agent.model), limit, agent.name)

    async def run(
        self,
        system: list[Message],
        history: list[Message],
        new: list[Message],
        *,
        answered: ModelResponse | None = None,
    ) -> tuple[JsonValue, Usage, int]:
        """``answered``: the answer to the run's first model call, made and counted
        already (``_one_call``)."""
        messages = [*system, *history, *new]
        self.produced.extend(new)
        texts: list[str] = []
        """Every text the model wrote in this turn: the answer, where there is no schema."""
        for step in range(1, self.agent.spec.limits.max_steps + 1):
            if answered is not None:
                response, answered = answered, None
            else:
                response = await self._model_step(step, messages)
            if response.content:
                texts.append(response.content)
            client_calls = [c for c in response.tool_calls if c.name in self.client_names]
            if client_calls:  # the caller runs these: the turn ends with the calls
                ended = ModelResponse(response.content, tuple(client_calls), response.usage)
                self._keep(messages, ended.to_message())
                text = STEP_SEPARATOR.join(texts)
                self.ctx.emit(FinalOutput(trace_id=self.ctx.trace_id, step=step, output=text))
                return text, self.ctx.usage, step
            self._keep(messages, response.to_message())
            if response.tool_calls:
                for message in await self._run_tools(step, response.tool_calls):
                    self._keep(messages, message)
                continue
            text = (response.content or "") if self.validator else STEP_SEPARATOR.join(texts)
            output, problem = await self._checked_output(text)
            if problem is None:
                self.ctx.emit(FinalOutput(trace_id=self.ctx.trace_id, step=step, output=output))
                return output, self.ctx.usage, step
            self._keep(messages, {"role": "user", "content": problem})
        raise MaxStepsExceeded(
            f"no final answer within limits.max_steps = {self.agent.spec.limits.max_steps}"
        )

    def _keep(self, messages: list[Message], message: Message) -> None:
        messages.append(message)
        self.produced.append(message)

    async def _model_step(self, step: int, messages: list[Message]) -> ModelResponse:
        ctx = self.ctx
        self.meter.before_call(ctx)
        ctx.model_calls = step
        request = ModelRequest(
            tuple(messages),
            self.definitions,
            self.agent.spec.parallel_tool_calls,
            self.schema,
            self.options.first_choice(step),
            self.options.settings,
        )
        prompt = prompt_size(messages, self.definition_chars)
        ctx.emit(
            ModelRequestEvent(
                trace_id=ctx.trace_id,
                step=step,
                model=self.agent.model.name,
                messages=len(messages),
                prompt_chars=prompt,
            )
        )
        started = time.perf_counter()
        streamed = StreamedCall(self.agent.model, ctx) if self.stream else None
        handler = streamed or self.agent.model.request
        try:
            with within(f"chat {step}"):  # the span the model call's traceparent names
                response = await self.agent.chain.call_model(ctx, request, handler)
        except asyncio.CancelledError:
            chars = streamed.chars if streamed else 0
            count_cut(self.agent.prices, self.agent.model, ctx, prompt, chars)
            raise
        ctx.usage += response.usage
        cost = self.meter.cost(response)
        ctx.emit(response_event(ctx, step, self.agent.model, response, started=started, cost=cost))
        # Attempts of this call the client cut off count toward the ceilings with it.
        cut = take_cut_attempts(self.agent.prices, ctx, CUT_ATTEMPTS.get())
        self.meter.after_call(ctx, None if cost is None or cut is None else cost + cut)
        return response

    async def _run_tools(self, step: int, calls: Sequence[ToolCallRequest]) -> list[Message]:
        with self.meter.calling():  # an agent called as a tool spends against our ceiling
            if self.agent.spec.parallel_tool_calls and len(calls) > 1:
                tools = [self._run_tool(step, c, together=True) for c in calls]
                outcomes = await all_or_none(tools)
            else:
                outcomes = [await self._run_tool(step, c) for c in calls]
        return [
            {"role": "tool", "tool_call_id": call.id, "content": outcome.output}
            for call, outcome in zip(calls, outcomes, strict=True)
        ]

    async def _run_tool(
        self, step: int, call: ToolCallRequest, *, together: bool = False
    ) -> ToolOutcome:
        ctx = self.ctx
        ctx.tool_calls += 1
        ctx.emit(
            ToolCallEvent(
                trace_id=ctx.trace_id,
                step=step,
                call_id=call.id,
                name=call.name,
                arguments=call.arguments,
            )
        )
        if together:
            # Let the calls started beside this one announce themselves first, so that a
            # trace reads every tool_call of a step before any result, however fast a tool.
            await asyncio.sleep(0)
        started = time.perf_counter()
        try:
            with within(f"tool {step} {call.id}"):  # the span an HTTP or MCP call names
                outcome = await self.agent.chain.call_tool(ctx, call, self._execute_tool)
        except RunError:
            raise
        except Exception as exc:
            outcome = self._tool_error(call, exc)
        ctx.emit(
            ToolResultEvent(
                trace_id=ctx.trace_id,
                step=step,
                call_id=call.id,
                name=call.name,
                output=outcome.output,
                is_error=outcome.is_error,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
            )
        )
        return outcome

    async def _execute_tool(self, call: ToolCallRequest) -> ToolOutcome:
        tool = self.agent.tools.get(call.name)
        if tool is None:
            known = ", ".join(self.agent.tools) or "none"
            return tool_error(f"unknown tool {call.name!r}; available: {known}")
        try:
            arguments, problem = await off_loop(parsed_arguments, tool, call.arguments)
        except ValueError as exc:
            return tool_error(f"arguments are not valid JSON ({exc}); send a JSON object")
        if problem is not None:
            return tool_error(f"invalid arguments: {problem}")
        try:
            # asyncio.timeout, not wait_for: no extra task per call (and the tool keeps the
            # run's context, e.g. the caller scope agent tools read).
            async with asyncio.timeout(tool.timeout):
                output = await tool.function(arguments)
        except TimeoutError:
            raise ToolTimeout(f"tool {tool.name!r} took longer than {tool.timeout} s") from None
        return ToolOutcome(output)

    def _tool_error(self, call: ToolCallRequest, exc: Exception) -> ToolOutcome:
        tool = self.agent.tools.get(call.name)
        message = str(exc) or type(exc).__name__
        if tool is not None and tool.on_error == "fail":
            raise ToolFailed(f"tool {call.name!r} failed: {message}")
        return tool_error(f"{type(exc).__name__}: {message}")

    async def _checked_output(self, content: str) -> tuple[JsonValue, str | None]:
        if self.validator is None:
            return content, None
        return await off_loop(self._check_output, content)

    def _check_output(self, content: str) -> tuple[JsonValue, str | None]:
        """The final output, or a message telling the model what to fix."""
        if self.validator is None:
            return content, None
        try:
            value = json.loads(unfenced(content.strip()))
            error = jsonschema.exceptions.best_match(self.validator.iter_errors(value))
        except ValueError:
            return self._retry_output(content, "the answer is not valid JSON")
        except RecursionError:  # the model's text, not ours: an invalid answer, not a crash
            return self._retry_output(content, "the answer nests too deeply")
        if error is None:
            return value, None
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        return self._retry_output(content, f"at {where}: {error.message}")

    def _retry_output(self, content: str, problem: str) -> tuple[JsonValue, str]:
        if self.output_retries <= 0:
            raise OutputValidationError(
                f"the final answer does not match the output schema: {problem}"
            )
        self.output_retries -= 1
        schema = json.dumps(self.schema)
        return content, (
            f"Your answer does not match the required output schema: {problem}. "
            f"Reply with only a JSON value that validates against this schema: {schema}"
        )
