"""``dynagent health``: asks a service on this machine whether it is alive, reading the
same settings as ``dynagent serve`` (``--config``/``DYNAGENT_CONFIG``, ``DYNAGENT_PORT``,
``DYNAGENT_HOST``), so a container's health check follows the port it was given."""

from __future__ import annotations

import argparse
import ipaddress
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104 - read, not bound


def config_path() -> Path | None:
    """``--config``'s default: ``DYNAGENT_CONFIG`` when set."""
    value = os.environ.get("DYNAGENT_CONFIG", "")
    return Path(value) if value else None


def add_commands(commands: Any) -> None:
    check = commands.add_parser("health", help="check that the local service answers /healthz")
    check.add_argument("--config", type=Path, default=config_path(), help="service config")
    check.add_argument("--timeout", type=float, default=2.0, help="seconds (default 2)")
    check.set_defaults(func=health)


def probe_url(host: str, port: int) -> str:
    """The address to probe for a server listening on ``host``: a wildcard is probed on
    the loopback of its family."""
    host = WILDCARDS.get(host, host)
    try:
        literal = ipaddress.ip_address(host)
    except ValueError:
        return f"http://{host}:{port}/healthz"
    return (
        f"http://[{host}]:{port}/healthz"
        if literal.version == 6
        else f"http://{host}:{port}/healthz"
    )


def health(args: argparse.Namespace) -> int:
    from dynagent.config import load_config  # not at the top: --help stays fast

    config = load_config(args.config)
    url = probe_url(config.listen.host, config.listen.port)
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as answer:  # noqa: S310 - http only
            print(f"healthy: {url} answered {answer.status}")
            return 0
    except urllib.error.HTTPError as exc:
        print(f"unhealthy: {url} answered {exc.code}")
    except (OSError, ValueError) as exc:
        print(f"unhealthy: {url}: {getattr(exc, 'reason', exc)}")
    return 1
