"""``dynagent eval capture NAME --last N``: a running service's recent answered runs of an
agent as an evaluation suite file (a backtest from production).

The service builds the suite from the traces it keeps (``GET /v1/agents/{name}/capture``,
admin key); this command validates it again with ``load_suite`` and writes it as YAML,
to ``--out`` or to standard output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from dynagent.cli import remote

COMMAND = "eval-capture"
"""How the parser knows ``dynagent eval capture`` (``spelled`` turns one into the other)."""


def add_commands(commands: Any) -> None:
    capture = commands.add_parser(
        COMMAND,
        prog="dynagent eval capture",
        help="dynagent eval capture NAME: recent runs of an agent as a suite (a backtest)",
        description=__doc__,
    )
    capture.add_argument("name")
    capture.add_argument(
        "--last", type=int, default=50, metavar="N", help="the last N answered runs (default 50)"
    )
    capture.add_argument("--variant", choices=["stable", "canary"], default="stable")
    capture.add_argument("--judge", default="judge-bot", help="the judge agent the suite names")
    capture.add_argument("--rubric", help="a rubric the pairwise comparisons follow")
    capture.add_argument(
        "--out", type=Path, help="write the suite here (e.g. NAME.evals.yaml); default: stdout"
    )
    remote.client_options(capture)
    capture.set_defaults(func=capture_command)


def spelled(argv: Sequence[str]) -> list[str]:
    """``eval capture …`` as the parser knows it (``eval-capture …``)."""
    argv = list(argv)
    if argv[:2] == ["eval", "capture"]:
        return [COMMAND, *argv[2:]]
    return argv


def capture_command(args: argparse.Namespace) -> int:
    import http.client

    import yaml

    from dynagent.evals.spec import load_suite
    from dynagent.exceptions import ConfigError

    query: dict[str, Any] = {"last": args.last, "variant": args.variant, "judge": args.judge}
    path = f"/v1/agents/{quote(args.name, safe='')}/capture?{urlencode(query)}"
    try:
        status, raw = remote.request(args, "GET", path)
    except (OSError, http.client.HTTPException) as exc:
        print(f"error: cannot reach the service at {args.url}: {exc}", file=sys.stderr)
        return 3
    try:
        answer = json.loads(raw or b"null")
    except ValueError:
        print(f"error: {args.url} answered HTTP {status} without JSON", file=sys.stderr)
        return 3
    if status >= 400:
        error = answer.get("error", {}) if isinstance(answer, dict) else {}
        print(
            f"error: {error.get('message', answer)} ({error.get('type', status)})", file=sys.stderr
        )
        return 1
    document = answer["suite"]
    if args.rubric:  # added here: a rubric may be longer than a request line
        for case in document["cases"]:
            for check in case["assert"]:
                check["value"] = args.rubric
    try:
        load_suite(document, source="capture", agent=args.name)
    except ConfigError as exc:
        print(f"error: the captured suite is not valid: {exc}", file=sys.stderr)
        return 1
    text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
    where = f" to {args.out}" if args.out else ""
    skipped = answer.get("skipped", [])
    print(
        f"{args.name}: captured {answer['cases']} cases from {args.variant} runs{where}"
        + (f" ({len(skipped)} runs skipped: {skipped[0]['reason']} …)" if skipped else ""),
        file=sys.stderr,
    )
    return 0
