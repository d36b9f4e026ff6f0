"""The fenced blocks of the README and docs/, run the way a reader runs them.

Every shell block carries a marker on the line before its fence, an HTML comment that
mkdocs and GitHub do not show:

    <!-- docs-test: run SERVICE -->      run against SERVICE, in document order
    <!-- docs-test: setup SERVICE -->    starts SERVICE: ``dynagent serve`` lines run in
                                         the background until ready, the others in order
    <!-- docs-test: publish SERVICE DATA_ID -->   (on a YAML block) published into
                                         SERVICE's Nacos group as the console would
    <!-- docs-test: skip REASON -->      not run, for the reason given

SERVICE is ``files`` (what ``make run`` serves: the Makefile's own ``run`` recipe), ``nacos``
(the README's Nacos section) or ``fleet`` (``scripts/fleet.sh``). A block runs verbatim with
``bash -euo pipefail`` in a workspace laid out like the repository (a copy of
``config-samples/`` under git, ``scripts/``, ``.venv``), with ``curl`` failing on an HTTP
error (``--fail-with-body``): a 415 or a 404 fails the block. What differs from a reader's
machine is the addresses: ``localhost:8090`` and ``127.0.0.1:8848`` become the ports the
test's service and Nacos listen on (``DYNAGENT_URL`` tells the ``dynagent`` commands).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .process import stopped_cleanly

ROOT = Path(__file__).resolve().parents[2]
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
SHELL = ("sh", "bash", "shell", "console")
MARKER = "<!-- docs-test:"
ACTIONS = ("run", "setup", "publish", "skip")
SERVICES = ("files", "nacos", "fleet")
VENV = Path(sys.executable).parents[1]
CURL = shutil.which("curl") or "/usr/bin/curl"


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with its marker."""

    page: Path
    line: int
    """1-based line of the opening fence."""
    info: str
    """The fence's info string (``sh``, ``yaml``, …)."""
    text: str
    action: str
    """``run``, ``setup``, ``publish``, ``skip``, or ``unmarked``."""
    words: tuple[str, ...]
    """What follows the action: the service (and a dataId), or the reason to skip."""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def shell(self) -> bool:
        return self.info in SHELL

    @property
    def service(self) -> str:
        return self.words[0] if self.words else ""


def _marker(line: str) -> tuple[str, tuple[str, ...]]:
    line = line.strip()
    if not (line.startswith(MARKER) and line.endswith("-->")):
        return "unmarked", ()
    action, *words = line[len(MARKER) : -3].split() or ["unmarked"]
    return action, tuple(words)


def blocks(pages: tuple[Path, ...] = PAGES) -> list[Block]:
    """Every fenced block of ``pages``, in order."""
    found: list[Block] = []
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("```"):
                i += 1
                continue
            start, info = i, lines[i][3:].strip()
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            before = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            action, words = _marker(before)
            text = "\n".join(lines[start + 1 : i]) + "\n"
            found.append(Block(page, start + 1, info, text, action, words))
            i += 1
    return found


def of_service(service: str) -> list[Block]:
    """The marked blocks of ``service``, in reading order (README first)."""
    return [b for b in blocks() if b.action in ("run", "setup", "publish") and b.service == service]


def make_run_command() -> str:
    """The command of the Makefile's ``run`` recipe, ``$(BIN)`` spelled out."""
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    start = lines.index(next(line for line in lines if line.startswith("run:")))
    recipe = next(line for line in lines[start + 1 :] if line.startswith("\t"))
    return recipe.strip().replace("$(BIN)", ".venv/bin")


def addressed(text: str, service_port: int, nacos_addr: str = "") -> str:
    """``text`` with the documented addresses replaced by the test's."""
    text = text.replace("localhost:8090", f"127.0.0.1:{service_port}")
    text = text.replace("127.0.0.1:8090", f"127.0.0.1:{service_port}")
    return text.replace("127.0.0.1:8848", nacos_addr) if nacos_addr else text


class Workspace:
    """A directory laid out like the repository for the blocks to run in."""

    def __init__(self, root: Path, environ: dict[str, str]) -> None:
        self.root = root
        shutil.copytree(ROOT / "config-samples", root / "config-samples")
        for name, target in (("scripts", ROOT / "scripts"), (".venv", VENV)):
            (root / name).symlink_to(target)
        (root / ".cache").symlink_to((ROOT / ".cache").resolve())
        shim = root / "bin" / "curl"
        shim.parent.mkdir()
        shim.write_text(f'#!/bin/sh\nexec {CURL} --fail-with-body "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
        outside = ("OPENAI_", "DYNAGENT_", "NACOS_", "FLEET_", "GIT_")
        self.environ = {k: v for k, v in os.environ.items() if not k.startswith(outside)}
        self.environ.update(environ)
        self.environ["PATH"] = f"{shim.parent}{os.pathsep}{self.environ.get('PATH', '')}"
        for command in (
            ["git", "init", "-q"],
            ["git", "add", "config-samples"],
            [
                "git",
                "-c",
                "user.name=docs",
                "-c",
                "user.email=docs@localhost",
                "commit",
                "-qm",
                ".",
            ],
        ):
            subprocess.run(command, cwd=root, env=self.environ, check=True, capture_output=True)

    def run(self, block: Block, text: str, timeout: float = 180) -> str:
        """Run ``text`` (``block``'s, addressed) with bash; its output, or a failure that
        names the block."""
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", text],
            cwd=self.root,
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"the block at {block.where} failed (exit {done.returncode}):\n{text}\n"
                f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
            )
        return done.stdout

    @contextmanager
    def serving(self, command: str, url: str) -> Iterator[None]:
        """``command`` (a ``dynagent serve`` line) running in the background, ready at
        ``url``, until the block ends; then stopped with SIGTERM, which must exit 0."""
        server = subprocess.Popen(
            ["bash", "-c", f"exec {command}"],
            cwd=self.root,
            env=self.environ,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        with stopped_cleanly(server, url):
            yield

    @contextmanager
    def setup(self, block: Block, text: str, url: str) -> Iterator[None]:
        """Run a ``setup`` block: its ``dynagent serve`` line in the background (until the
        block ends), every other line before it, in order."""
        lines = [line for line in text.splitlines() if line.strip()]
        serve = [line for line in lines if "dynagent serve" in line]
        assert len(serve) == 1, f"{block.where}: a setup block starts one service"
        before = lines[: lines.index(serve[0])]
        if before:
            self.run(block, "\n".join(before) + "\n")
        with self.serving(serve[0].split("#", 1)[0], url):
            yield


def wait_serving(url: str, names: tuple[str, ...], within: float = 60) -> None:
    """Until each of ``names`` serves at ``url`` (what the prose's "a moment later" means)."""
    deadline = time.monotonic() + within
    for name in names:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/v1/agents/{name}", timeout=5) as response:
                    if json.loads(response.read()).get("state") == "serving":
                        break
            except urllib.error.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not serve at {url} within {within} s")
            time.sleep(0.05)
