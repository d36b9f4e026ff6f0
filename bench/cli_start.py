"""How long the ``dynagent`` command takes to answer, as a ratio to starting Python at all
(``python -c pass``, measured in the same run, the cases taking turns so that a busy
machine slows them alike): ``dynagent --help``, and ``dynagent agents`` against a local
stand-in that answers ``{"agents": []}`` at once (the command's own cost, not the
service's). The bar is half a second on the reference machine (2 cores), where Python
itself starts in 30-50 ms: as a ratio, which travels between machines and holds on a busy
one, at most ``BAR_RATIO`` times ``python -c pass``.

    .venv/bin/python -m bench.cli_start            # 15 rounds
    .venv/bin/python -m bench.cli_start --quick    # 5 rounds
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

BAR_RATIO = 10.0
"""``dynagent --help`` and ``dynagent agents`` answer within this many times Python's own
start: under half a second where that takes 50 ms."""


class _Agents(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"agents": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _stand_in() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Agents)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _dynagent() -> list[str]:
    """The console script a user runs, beside this Python (``-m dynagent`` without one)."""
    script = Path(sys.executable).parent / "dynagent"
    return [str(script)] if script.exists() else [sys.executable, "-m", "dynagent"]


def _seconds(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def measure(rounds: int) -> dict[str, Any]:
    with _stand_in() as url:
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "dynagent --help": [*_dynagent(), "--help"],
            "dynagent agents": [*_dynagent(), "agents", "--url", url],
        }
        for command in cases.values():  # warm the file cache once
            _seconds(command)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(rounds):
            for name, command in cases.items():
                times[name].append(_seconds(command))
    floor = statistics.median(times["python -c pass"])
    figures: dict[str, Any] = {"rounds": rounds, "bar_ratio": BAR_RATIO}
    for name, values in times.items():
        median = statistics.median(values)
        figures[name] = {
            "median_s": round(median, 4),
            "ratio_to_python": round(median / floor, 2),
            "met": median / floor <= BAR_RATIO,
        }
    return figures


def bars(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The bars of ``python -m bench``'s table that these figures decide."""
    return [
        {
            "bar": f"{command} / python -c pass",
            "value": figures[command]["ratio_to_python"],
            "limit": f"<= {BAR_RATIO:g}",
            "met": figures[command]["met"],
        }
        for command in ("dynagent --help", "dynagent agents")
        if command in figures
    ]


def table(figures: dict[str, Any]) -> str:
    lines = [f"{'command':20}{'median s':>10}{'/ python -c pass':>18}  bar <= {BAR_RATIO:g}x"]
    for name, row in figures.items():
        if isinstance(row, dict):
            verdict = "met" if row["met"] else "NOT MET"
            lines.append(
                f"{name:20}{row['median_s']:>10.3f}{row['ratio_to_python']:>17.2f}x  {verdict}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    args = parser.parse_args(argv)
    figures = measure(5 if args.quick else 15)
    print(table(figures))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
