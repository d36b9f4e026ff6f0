"""``dynagent eval NAME``: run an agent's evaluation suite on a running service, with a
live progress bar and a result table; exit status 1 when the suite's rule fails, so the
command drops into a CI pipeline.

The run is ``POST /v1/agents/{name}/evals`` (an admin key) followed as server-sent
events with the standard library's ``http.client``; ``rich`` draws the bar and the
table. Both are imported when the command runs, never for ``--help``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8090"
PASSED, FAILED, USAGE = 0, 1, 2
"""Exit statuses: the rule passed; it failed (or the run could not finish); the command
could not run it (a bad option or file, no service, a refusal)."""


def add_commands(commands: Any) -> None:
    run = commands.add_parser(
        "eval",
        help="run an agent's evaluation suite on a running service (exit 1 when it fails)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("name")
    which = run.add_mutually_exclusive_group()
    which.add_argument(
        "--variant", choices=["stable", "canary"], help="the served version (default stable)"
    )
    which.add_argument("--revision", help="a revision the service still keeps")
    which.add_argument(
        "--spec", metavar="FILE", help="a draft agent document (YAML or JSON): run, never served"
    )
    run.add_argument("--suite", metavar="FILE", help="a suite to run instead of the agent's own")
    run.add_argument(
        "--case", action="append", dest="cases", metavar="ID", help="only this case (repeatable)"
    )
    run.add_argument("--concurrency", type=int, help="case runs at once (default 8, at most 64)")
    run.add_argument(
        "--compare",
        action="store_true",
        help="run the stable version on the same cases too and show each case's change",
    )
    run.add_argument("--json", action="store_true", help="print the whole run as JSON")
    run.add_argument("--url", default=os.environ.get("DYNAGENT_URL", DEFAULT_URL))
    run.add_argument(
        "--api-key",
        default=os.environ.get("DYNAGENT_API_KEY"),
        help="an admin key (default: $DYNAGENT_API_KEY)",
    )
    run.add_argument(
        "--timeout",
        type=float,
        default=600.0,
        help="seconds to wait for the next finished case (default 600)",
    )
    run.set_defaults(func=evaluate)


class _Refused(Exception):
    """The command cannot run the evaluation; the message says why."""


def evaluate(args: argparse.Namespace) -> int:
    try:
        body = _body(args)
        record = _follow(args, body)
    except _Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USAGE
    if args.json:
        print(json.dumps(record, indent=2, ensure_ascii=False))
    else:
        from dynagent.cli._eval_table import show  # rich: only when a table is drawn

        show(record)
    return PASSED if record.get("state") == "passed" else FAILED


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"trigger": "cli"}
    if args.variant:
        body["variant"] = args.variant
    if args.revision:
        body["revision"] = args.revision
    if args.spec:
        body["spec"] = _document(args.spec)
    if args.suite:
        body["suite"] = _document(args.suite)
    if args.cases:
        body["cases"] = args.cases
    if args.concurrency is not None:
        body["concurrency"] = args.concurrency
    if args.compare:
        body["compare"] = True
    return body


def _document(path: str) -> Any:
    """A YAML or JSON file as data (the service validates it)."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise _Refused(f"cannot read {path}: {exc}") from None
    if path.endswith(".json"):
        try:
            return json.loads(text)
        except ValueError as exc:
            raise _Refused(f"{path} is not valid JSON: {exc}") from None
    import yaml  # here: only a YAML file needs it

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _Refused(f"{path} is not valid YAML: {exc}") from None


def _follow(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    """Start the run and follow its events to the end, with a progress bar on stderr."""
    import http.client  # here: ``--help`` does not need it
    from urllib.parse import urlsplit

    url = urlsplit(args.url.rstrip("/") + f"/v1/agents/{args.name}/evals")
    kind = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    connection = kind(url.netloc, timeout=args.timeout)
    try:
        connection.request("POST", url.path, body=json.dumps(body).encode(), headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise _Refused(_refusal(response.status, response.read()))
        return _progress(_events(response))
    except (OSError, http.client.HTTPException) as exc:
        raise _Refused(f"cannot reach the service at {args.url}: {exc}") from None
    finally:
        connection.close()


def _refusal(status: int, raw: bytes) -> str:
    try:
        error = json.loads(raw).get("error", {})
    except (ValueError, AttributeError):
        return f"the service answered HTTP {status} without JSON: is it Dynagent?"
    return f"{error.get('message', status)} ({error.get('type', status)})"


def _events(response: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(event, data)`` of a ``text/event-stream`` answer, as they arrive."""
    name = "message"
    data: list[str] = []
    for raw in response:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").strip())


def _progress(events: Iterator[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("evaluating", total=None)
        for name, data in events:
            if name == "done":
                return data
            if name == "case":
                mark = "passed" if data.get("passed") else "FAILED"
                bar.update(
                    task,
                    completed=data.get("done", 0),
                    total=data.get("total"),
                    description=f"{data.get('variant', '')} {data.get('id')}: {mark}",
                )
    raise _Refused("the service closed the stream before the run ended")
