"""``dynagent validate`` and ``dynagent schema``: agent files checked with no service."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from dynagent.exceptions import ConfigError


def add_commands(commands: Any) -> None:
    check = commands.add_parser("validate", help="check agent files and evaluation suites")
    check.add_argument("files", nargs="+", type=Path)
    check.set_defaults(func=validate)
    commands.add_parser("schema", help="print the AgentSpec JSON Schema").set_defaults(func=schema)


def validate(args: argparse.Namespace) -> int:
    from dynagent.evals.spec import is_suite_key  # not for ``--help``
    from dynagent.runtime.builder import AgentBuilder
    from dynagent.sources.files import load_agent_file

    failed = 0
    builder = AgentBuilder(offline=True)
    for path in args.files:
        try:
            if is_suite_key(path.name):
                print(f"{path}: ok ({_suite_summary(path)})")
                continue
            spec = load_agent_file(path)
            builder.build(spec)
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{path}: cannot read: {exc}", file=sys.stderr)
            failed += 1
        except ConfigError as exc:
            print(f"{path}: {exc.reason}", file=sys.stderr)
            for issue in exc.issues:
                print(f"  {issue}", file=sys.stderr)
            failed += 1
        else:
            print(f"{path}: ok ({spec.name}, revision {spec.revision})")
    return 1 if failed else 0


def _suite_summary(path: Path) -> str:
    """Validate the evaluation suite at ``path``; what ``validate`` says of it."""
    from dynagent.evals.spec import load_suite, suite_agent
    from dynagent.spec.agent import format_of

    name = suite_agent(path.name)
    text = path.read_text(encoding="utf-8")
    suite = load_suite(text, fmt=format_of(path.name), source=str(path), agent=name)
    return f"evaluation suite of {name}, revision {suite.revision}, {len(suite.cases)} cases"


def schema(args: argparse.Namespace) -> int:
    from dynagent.spec.agent import json_schema  # not for ``--help``

    print(json.dumps(json_schema(), indent=2))
    return 0
