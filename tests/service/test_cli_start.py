"""The ``dynagent`` command starts fast: building its parser, ``--help`` and a client
command import none of the libraries the service runs on (openai, mcp, the Nacos SDK,
aiohttp, pydantic …), which took five seconds and more before any command ran. How fast
it is in seconds is ``bench/cli_start.py``'s figure; what it must not import is here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.process import free_port

HEAVY = frozenset(
    {
        "openai",
        "mcp",
        "v2",  # nacos-sdk-python
        "aiohttp",
        "httpx",
        "pydantic",
        "yaml",
        "loguru",
        "a2a",
        "opentelemetry",
        "watchdog",
        "re2",
        "asyncio",
        "rich",
    }
)
"""Top-level packages a command that does not serve, build or reach Nacos never needs."""

PROBE = """
import json, sys
from dynagent.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
heavy = set(json.loads({heavy!r}))
loaded = sorted({{name.split(".")[0] for name in sys.modules}} & heavy)
print(json.dumps({{"code": code, "loaded": loaded}}), file=sys.stderr)
"""


def imported_by(*argv: str) -> dict[str, object]:
    """The exit code of ``dynagent ARGV`` in a fresh interpreter, and which of ``HEAVY``
    it had imported when it finished."""
    code = PROBE.format(heavy=json.dumps(sorted(HEAVY)))
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    last: dict[str, object] = json.loads(done.stderr.strip().splitlines()[-1])
    return last


@pytest.mark.parametrize(
    "argv",
    [
        ("--help",),
        ("serve", "--help"),
        ("health", "--help"),
        ("mcp", "list", "--help"),
        ("publish", "--help"),
        ("validate", "--help"),
        ("eval", "--help"),
        ("agents", "--url", "http://127.0.0.1:{port}"),
        ("promote", "bot", "--url", "http://127.0.0.1:{port}"),
        ("invoke", "bot", "hi", "--url", "http://127.0.0.1:{port}"),
        ("eval", "bot", "--url", "http://127.0.0.1:{port}"),
    ],
    ids=lambda argv: " ".join(a for a in argv if not a.startswith("http")),
)
def test_a_command_that_does_not_serve_imports_none_of_the_service_libraries(
    argv: tuple[str, ...],
) -> None:
    port = free_port()  # nothing listens: the client commands answer "cannot reach"
    found = imported_by(*(a.format(port=port) for a in argv))
    # ``eval`` says "cannot reach" with 2, as it does every failure to start a run.
    expected_code = 0 if "--help" in argv else 2 if argv[0] == "eval" else 3
    assert found == {"code": expected_code, "loaded": []}


def test_the_package_names_its_public_surface_without_importing_it() -> None:
    """``import dynagent`` is cheap; each public name still resolves, to where it lives."""
    code = (
        "import sys, dynagent\n"
        "before = 'openai' in sys.modules\n"
        "names = [getattr(dynagent, n) for n in dynagent.__all__]\n"
        "print(before, 'openai' in sys.modules, len(names) == len(set(map(id, names))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.split() == ["False", "True", "True"]
