"""The image's pieces a test can check without building it: the build context carries
only what the Dockerfile copies, and the health check follows the port the server was
given. Building and starting the image itself is ``scripts/image.sh check`` (buildah, no
engine), a separate check for its time: see docs/deployment.md."""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from pathlib import Path

import yaml

from tests.support.process import DYNAGENT, free_port, wait_ready

REPO = Path(__file__).resolve().parents[2]
LOCAL_ONLY = [".venv", ".cache", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache", "var"]
"""What a working copy holds beside the tracked files (about 1 GB of it in .venv, .cache)."""


def copied() -> set[str]:
    """The top-level names the Dockerfile's COPY lines take from the context."""
    names: set[str] = set()
    for line in (REPO / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            names.update(Path(word).parts[0] for word in line.split()[1:-1])
    return names


def ignored(name: str) -> bool:
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)


def test_the_build_context_holds_what_the_image_copies_and_nothing_else() -> None:
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    top = {Path(path).parts[0] for path in tracked} | set(LOCAL_ONLY)
    needed = copied()
    assert needed >= {"pyproject.toml", "service", "config-samples"}
    assert not [name for name in needed if ignored(name)]
    carried = sorted(name for name in top - needed if not ignored(name))
    assert carried == [".dockerignore", "Dockerfile"]  # an engine reads these two itself


def test_the_image_runs_as_a_fixed_non_root_user_and_checks_its_health_by_its_settings() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    user = re.findall(r"^USER (\S+)$", dockerfile, re.MULTILINE)
    assert user == ["10001:10001"]
    assert "useradd --uid 10001" in dockerfile and "--system" not in dockerfile
    assert 'HEALTHCHECK --interval=10s --timeout=3s CMD ["dynagent", "health"]' in dockerfile
    assert "ARG EXTRAS=redis,otel" in dockerfile


def health(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(DYNAGENT), "health"], check=False, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_health_check_follows_the_port_and_config_the_server_was_given(
    tmp_path: Path,
) -> None:
    """``dynagent health`` reads ``DYNAGENT_CONFIG`` and ``DYNAGENT_*`` as ``serve`` does:
    the server here takes its port from the environment, then from its config file."""
    agents = tmp_path / "agents"
    agents.mkdir()
    config = tmp_path / "service.yaml"
    port = free_port()
    config.write_text(
        yaml.safe_dump(
            {"listen": {"port": port}, "factories": {"default": {"directory": str(agents)}}}
        )
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("DYNAGENT_")}
    env = {**base, "DYNAGENT_CONFIG": str(config)}
    other = free_port()
    for served_on, server_env in ((other, {**env, "DYNAGENT_PORT": str(other)}), (port, env)):
        server = subprocess.Popen(
            [str(DYNAGENT), "serve"], env=server_env, stderr=subprocess.DEVNULL, text=True
        )
        try:
            wait_ready(f"http://127.0.0.1:{served_on}", server)
            ok = health(server_env)
            assert (ok.returncode, ok.stdout.strip()) == (
                0,
                f"healthy: http://127.0.0.1:{served_on}/healthz answered 200",
            )
            elsewhere = {**server_env, "DYNAGENT_PORT": str(free_port())}
            down = health(elsewhere)
            assert down.returncode == 1 and down.stdout.startswith("unhealthy: "), down
            assert "Connection refused" in down.stdout
        finally:
            server.terminate()
            server.wait(timeout=30)
