"""Text from outside is processed in linear time and never holds the event loop.

Each hostile 1 MB text runs in a child process under a timeout: on the code before the
fix the e-mail, code-fence and schema-pattern cases never finish (quadratic, cubic,
exponential), and the timeout turns that into a failure rather than a hung CI run.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import dynagent
from dynagent.interceptors import InterceptorRegistry
from dynagent.interceptors.base import Interceptor, RunContext
from tests.security._hostile_text import CASES
from tests.support import AgentFactory, Reply, ScriptedModelServer, event_types

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = Path(dynagent.__file__).parent
CHILD_TIMEOUT = 30  # seconds; the fixed code needs well under one for each case


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_megabyte_is_handled_in_linear_time(case: str) -> None:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tests.security._hostile_text", case],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: 1 MB not handled within {CHILD_TIMEOUT} s: the work is super-linear")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    print(f"\n{case}: {result['seconds']} s for 1 MB")
    assert result["case"] == case


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_no_module_compiles_a_backtracking_regex() -> None:
    """The class fix: patterns compile through ``dynagent._regex`` (RE2) and JSON Schema
    validators come from ``dynagent._schemas`` (RE2 for ``pattern`` keywords)."""
    offenders = {
        str(path.relative_to(PACKAGE)): sorted(_imports(path) & {"re", "regex"})
        for path in PACKAGE.rglob("*.py")
        if _imports(path) & {"re", "regex"}
    }
    assert offenders == {}
    validators = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "_schemas.py"
        and "Draft202012Validator(" in path.read_text(encoding="utf-8")
    }
    assert validators == set()


class _ThreadRecorder(Interceptor):
    """A redactor that notes the thread each text was masked on."""

    name = "thread_recorder"

    def __init__(self, config: dict[str, Any]) -> None:
        self.threads: dict[int, set[int]] = {}

    async def before_run(self, ctx: RunContext) -> None:
        ctx.redactors.append(self._note)

    def _note(self, text: str) -> str:
        self.threads.setdefault(len(text), set()).add(threading.get_ident())
        return text


async def test_big_texts_are_masked_off_the_event_loop_and_events_keep_their_order(
    make_agent: AgentFactory, model_server: ScriptedModelServer
) -> None:
    recorder = _ThreadRecorder({})
    interceptors = InterceptorRegistry.default()
    interceptors.register("thread_recorder", lambda config: recorder)
    answer = "b" * 200_000
    model_server.script("gpt-main", [Reply(answer, pieces=[answer]), Reply("fine")])
    agent = make_agent(interceptors=["thread_recorder"], interceptor_registry=interceptors)

    result = await agent.run("a" * 300_000)
    await agent.run("hello")

    loop_thread = threading.get_ident()
    assert {size: loop_thread in threads for size, threads in recorder.threads.items()} == {
        300_000: False,  # the input, in run_started
        200_000: False,  # the answer, in model_response and final_output
        len("hello"): True,  # short texts are masked inline
        len("fine"): True,
    }
    assert event_types(result.events) == [
        "run_started",
        "model_request",
        "model_response",
        "final_output",
        "run_finished",
    ]
    assert result.output == answer
