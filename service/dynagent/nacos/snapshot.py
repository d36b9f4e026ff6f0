"""Dynagent's own last-good copy of a Nacos group: what a restart serves while Nacos is
down, and what it serves while Nacos holds only a refused edit."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from loguru import logger


class Snapshot:
    """Dynagent's own copy of a group's documents as last accepted here, one file per
    dataId: the version this instance served, gray or formal. A document that was
    refused never replaces the one accepted before it."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, data_id: str, text: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # A short temporary name: a dataId may be as long as a file name can be (255).
        digest = hashlib.sha256(data_id.encode()).hexdigest()[:16]
        temporary = self.directory / f".{digest}.tmp"
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(self.directory / data_id)

    def read(self, data_id: str) -> str | None:
        """The copy of ``data_id`` last accepted, or None when there is none (or it cannot
        be read)."""
        try:
            return (self.directory / data_id).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None

    def delete(self, data_id: str) -> None:
        (self.directory / data_id).unlink(missing_ok=True)

    def load(self) -> tuple[dict[str, str], dict[str, str]]:
        """(the documents by dataId, the files that could not be read and why).

        One unreadable file (truncated mid-character, unreadable) is skipped, never the
        reason the others are not served: the snapshot exists for the bad day."""
        documents: dict[str, str] = {}
        unreadable: dict[str, str] = {}
        if not self.directory.is_dir():
            return documents, unreadable
        for path in sorted(self.directory.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue
            try:
                documents[path.name] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                unreadable[path.name] = f"not valid UTF-8 at byte {exc.start}"
            except OSError as exc:
                unreadable[path.name] = exc.strerror or type(exc).__name__
        return documents, unreadable

    def load_at_start(
        self, accepts: Callable[[str], bool], location: str, reason: str
    ) -> tuple[dict[str, str], str]:
        """``load_accepted``, logged as what a start with Nacos unreachable serves."""
        saved, skipped = self.load_accepted(accepts)
        logger.error(
            "Nacos source {} unavailable at start ({}); serving {} definitions from the "
            "snapshot in {}",
            location,
            reason,
            len(saved),
            self.directory,
        )
        if skipped:
            logger.error(
                "Nacos source {}: unreadable snapshot files skipped: {}", location, skipped
            )
        return saved, skipped

    def load_accepted(self, accepts: Callable[[str], bool]) -> tuple[dict[str, str], str]:
        """(the documents by dataId that ``accepts`` takes, the unreadable files skipped as
        ``name (why); ...``, empty when there were none)."""
        documents, unreadable = self.load()
        skipped = "; ".join(f"{name} ({why})" for name, why in unreadable.items())
        return {k: v for k, v in documents.items() if accepts(k)}, skipped
