"""A folder of agent files (``*.yaml``, ``*.yml``, ``*.json``), watched with watchdog.

Watchdog reports from its own thread; events cross to the event loop with
``call_soon_threadsafe`` and are coalesced for a few milliseconds, because an
editor saving a file produces several events (truncate, write, rename).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import tempfile
from pathlib import Path

from loguru import logger
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from dynagent.deadlines import cancelled
from dynagent.exceptions import Conflict
from dynagent.registry.canary import load_canary
from dynagent.runtime.agent import SourceInfo
from dynagent.sources.base import Document, OnChange, is_canary_key
from dynagent.spec.agent import AgentSpec, format_of, load_spec

SUFFIXES = (".yaml", ".yml", ".json")

MAX_FILE_BYTES = 1_000_000


def load_agent_file(path: Path) -> AgentSpec:
    """Read, parse and validate one agent file, a ``{name}.canary.yaml`` included (its
    ``rollout`` block and name are checked, as the service would). Raises ``ConfigError``,
    or ``OSError`` / ``UnicodeDecodeError`` when the file cannot be read."""
    text = path.read_text(encoding="utf-8")
    fmt = format_of(path.name)
    if is_canary_key(path.name):
        name = path.name.split(".", 1)[0]  # served only as the canary of that agent
        spec, _ = load_canary(text, fmt=fmt, source=str(path), name=name)
        return spec
    return load_spec(text, fmt=fmt, source=str(path))


def _lock_path(directory: Path) -> Path:
    """The lock file every process on this machine takes for a compare-and-set write into
    ``directory``: in the temp dir, so that the agents folder holds agent files only."""
    digest = hashlib.sha256(str(directory).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"dynagent-folder-{digest}.lock"


def is_agent_file(path: Path) -> bool:
    return path.suffix.lower() in SUFFIXES and not path.name.startswith(".")


class _Handler(FileSystemEventHandler):
    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[Path]) -> None:
        self.loop = loop
        self.queue = queue

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                path = Path(raw if isinstance(raw, str) else raw.decode())
                if is_agent_file(path):
                    self.loop.call_soon_threadsafe(self.queue.put_nowait, path)


def _unwatch(observer: BaseObserver) -> None:
    observer.stop()
    observer.join(5)


class FileSource:
    """The agent files of one folder. Its file I/O blocks: an event loop constructs it
    and calls ``write``, ``read`` and ``replace_if`` from a worker thread."""

    def __init__(self, directory: Path, *, settle: float = 0.02) -> None:
        self.directory = directory.resolve()
        self.settle = settle
        """Seconds to wait for more events on a file before reading it."""
        self._seen: dict[Path, str] = {}
        """The text of each readable agent file, to tell a change from a touch."""
        self._present: set[str] = set()
        """The agent files the folder holds as far as the watch has seen."""
        self._observer: BaseObserver | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self, on_change: OnChange) -> None:
        queue: asyncio.Queue[Path] = asyncio.Queue()
        # Off the loop: the folder is listed and read from a worker thread, one file at a
        # time (and starting the watch reads it too).
        self._observer = await asyncio.to_thread(
            self._watch, _Handler(asyncio.get_running_loop(), queue)
        )
        paths = await asyncio.to_thread(self._agent_files)
        self._present = {path.name for path in paths}
        for path in paths:
            await on_change(await asyncio.to_thread(self._read, path))
        # Events queued while the folder was read are applied now, in order.
        self._task = asyncio.create_task(self._pump(queue, on_change), name="file-source")

    def _watch(self, handler: _Handler) -> BaseObserver:
        if not self.directory.is_dir():
            raise FileNotFoundError(f"agents folder {self.directory} does not exist")
        observer = Observer()
        observer.schedule(handler, str(self.directory))
        observer.daemon = True
        observer.start()
        return observer

    def keys(self) -> set[str]:
        """The agent files in the folder as last seen, read or not (the first load lists
        them all before reading one)."""
        return self._present

    def _agent_files(self) -> list[Path]:
        return [p for p in sorted(self.directory.iterdir()) if is_agent_file(p) and p.is_file()]

    def write(self, filename: str, text: str | None) -> Path:
        """Replace (atomically) or delete ``filename`` in the folder; the watcher applies it.

        Raises ``Conflict`` when the file cannot be written: a symbolic link (replacing
        it would silently cut it from what it points to), or an ``OSError``.
        """
        path = self.directory / filename
        if path.parent != self.directory or not is_agent_file(path):
            raise Conflict(f"{filename!r} is not an agent file in the agents folder")
        try:
            if text is None:
                path.unlink(missing_ok=True)  # a link goes, never what it points to
                return path
            if path.is_symlink():
                raise Conflict(
                    f"agent file {filename} is a symbolic link; the service writes agent "
                    "files in place and never replaces a link: edit the file it points to, "
                    "or replace the link with a regular file"
                )
            temporary = path.with_name(f".{path.name}.tmp")
            temporary.write_text(text, encoding="utf-8")
            temporary.replace(path)
        except OSError as exc:
            raise Conflict(f"cannot write agent file {filename}: {exc.strerror}") from None
        return path

    def read(self, filename: str) -> str | None:
        """The text of ``filename`` in the folder now, or None when there is none."""
        try:
            return self._path(filename).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def replace_if(self, filename: str, text: str, expected: str) -> bool:
        """Replace ``filename`` with ``text`` only if it still reads ``expected``
        (compare-and-set: every process on this machine takes the folder's lock file)."""
        with _lock_path(self.directory).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.read(filename) != expected:
                return False
            self.write(filename, text)
            return True

    def _path(self, filename: str) -> Path:
        path = self.directory / filename
        if path.parent != self.directory or not is_agent_file(path):
            raise Conflict(f"{filename!r} is not an agent file in the agents folder")
        return path

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
        if self._observer is not None:
            await asyncio.to_thread(_unwatch, self._observer)

    async def _pump(self, queue: asyncio.Queue[Path], on_change: OnChange) -> None:
        while True:
            pending = {await queue.get()}
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settle):
                    while True:
                        pending.add(await queue.get())
            for document in await asyncio.to_thread(self._changed, pending):
                try:
                    await on_change(document)
                except Exception:  # one bad document must not stop the watch
                    logger.exception("applying {} failed", document.info.location)

    def _changed(self, paths: set[Path]) -> list[Document]:
        """The documents of ``paths`` whose content changed, removals first, so a
        renamed file releases its agent before its new name claims it."""
        changed = []
        for path in sorted(paths):
            known, previous = path in self._seen, self._seen.get(path)
            document = self._read(path)
            if known and document.text == previous and document.error is None:
                continue  # touched, not changed
            changed.append(document)
        return sorted(changed, key=lambda d: d.text is not None or d.error is not None)

    def _read(self, path: Path) -> Document:
        info = SourceInfo("file", str(path))
        text: str | None = None
        error = None
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                error = f"file larger than {MAX_FILE_BYTES} bytes"
            else:
                text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError) as exc:
            error = f"cannot read the file: {exc}"
        if text is None and error is None:
            self._present.discard(path.name)
        else:
            self._present.add(path.name)
        if text is None:
            # Gone (remembering every deleted name would grow forever), or unreadable:
            # either way its next event must be handed over, a deletion included.
            self._seen.pop(path, None)
        else:
            self._seen[path] = text
        return Document(path.name, text, format_of(path.name), info, error)
