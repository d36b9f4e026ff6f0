"""Fixtures for the fuzz tests: a folder of agent files and a place for state."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def agents_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "agents"
    folder.mkdir()
    return folder


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "state"
    folder.mkdir()
    return folder
