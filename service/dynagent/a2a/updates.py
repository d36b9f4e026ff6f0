"""A streamed run as A2A task updates (protocol 0.3, ``a2a-sdk`` types).

``message/stream`` answers with a ``Task`` as soon as the run starts, then, as the run
goes: the answer's text as chunks of one artifact (``append``; ``lastChunk`` on the
last), each tool call and tool result as a ``working`` status whose message carries it as
data, and a final ``completed`` or ``failed`` status. A client shows the first words when
the model writes them, not when the whole run is over.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from a2a.types import (
    Artifact,
    DataPart,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
    TextPart,
)

from dynagent.events import (
    ErrorEvent,
    Event,
    FinalOutput,
    ModelDelta,
    ToolCallEvent,
    ToolResultEvent,
)

ANSWER = "answer"
"""The id of the artifact that holds the run's answer."""

Update = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def answer_text(output: Any) -> str:
    """The final output as text: a string as it is, structured output as JSON."""
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


@dataclass(slots=True)
class TaskUpdates:
    """One run's events turned into the task updates ``message/stream`` sends.

    A model step that streams text replaces what an earlier step streamed (its first
    chunk has ``append: false``): text written before a tool call was not the answer.
    The final output closes the artifact; it is sent whole again only when it differs
    from what was streamed (structured output, an answer fixed to match its schema).
    """

    task_id: str
    context_id: str
    trace_id: str
    streamed: list[str] = field(default_factory=list)
    """The answer artifact's text so far, chunk by chunk."""
    step: int | None = None
    """The model step whose text the artifact holds."""
    done: bool = False

    def task(self, asked: Message) -> Task:
        """The task the stream opens with: working, the caller's message its history."""
        history = asked.model_copy(update={"task_id": self.task_id, "context_id": self.context_id})
        return Task(
            id=self.task_id,
            context_id=self.context_id,
            status=TaskStatus(state=TaskState.working),
            history=[history],
            metadata={"trace_id": self.trace_id},
        )

    def of(self, event: Event) -> list[Update]:
        """What ``event`` tells the caller: nothing, an update, or (the final output) the
        answer's last chunk and the final status. Nothing after the final status."""
        if self.done:
            return []
        if isinstance(event, FinalOutput):
            return self._finish(event)
        update = self._update(event)
        return [] if update is None else [update]

    def _update(self, event: Event) -> Update | None:
        if isinstance(event, ModelDelta):
            return self._delta(event)
        if isinstance(event, ToolCallEvent):
            data = {"call_id": event.call_id, "name": event.name, "arguments": event.arguments}
            return self._working({"tool_call": data})
        if isinstance(event, ToolResultEvent):
            data = {"call_id": event.call_id, "name": event.name, "output": event.output}
            return self._working({"tool_result": {**data, "is_error": event.is_error}})
        if isinstance(event, ErrorEvent):
            self.done = True
            text = Part(root=TextPart(text=event.message))
            return self._status(TaskState.failed, [text], {"type": event.error_type}, final=True)
        return None

    def _finish(self, event: FinalOutput) -> list[Update]:
        """The answer's last chunk, then the ``completed`` status."""
        self.done = True
        text = answer_text(event.output)
        if self.streamed and "".join(self.streamed) == text:
            last = self._chunk("", append=True, last=True)
        else:
            last = self._chunk(text, append=False, last=True)
        meta = {"trace_id": self.trace_id}
        return [last, self._status(TaskState.completed, None, None, final=True, metadata=meta)]

    def _delta(self, event: ModelDelta) -> TaskArtifactUpdateEvent:
        append = event.step == self.step
        if not append:
            self.step, self.streamed = event.step, []
        self.streamed.append(event.text)
        return self._chunk(event.text, append=append, last=False)

    def _chunk(self, text: str, *, append: bool, last: bool) -> TaskArtifactUpdateEvent:
        return TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=Artifact(
                artifact_id=ANSWER, name=ANSWER, parts=[Part(root=TextPart(text=text))]
            ),
            append=append,
            last_chunk=last,
        )

    def _working(self, data: dict[str, Any]) -> TaskStatusUpdateEvent:
        return self._status(TaskState.working, [Part(root=DataPart(data=data))], None, final=False)

    def _status(
        self,
        state: TaskState,
        parts: list[Part] | None,
        message_metadata: dict[str, Any] | None,
        *,
        final: bool,
        metadata: dict[str, Any] | None = None,
    ) -> TaskStatusUpdateEvent:
        message = None
        if parts is not None:
            message = Message(
                role=Role.agent,
                message_id=uuid.uuid4().hex,
                task_id=self.task_id,
                context_id=self.context_id,
                parts=parts,
                metadata=message_metadata,
            )
        return TaskStatusUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            status=TaskStatus(state=state, message=message),
            final=final,
            metadata=metadata,
        )
