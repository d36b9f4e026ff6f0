"""FileSource: a watched folder of agent files, as documents and change events."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dynagent.sources.base import Document
from dynagent.sources.files import MAX_FILE_BYTES, FileSource


class Recorder:
    """The ``on_change`` callback: keeps every document, in order."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Document] = asyncio.Queue()
        self.fail_on: set[str] = set()

    async def __call__(self, document: Document) -> bool:
        self.queue.put_nowait(document)
        if document.key in self.fail_on:
            raise RuntimeError(f"cannot apply {document.key}")
        return True

    async def next(self) -> Document:
        async with asyncio.timeout(5):
            return await self.queue.get()

    def delivered(self) -> list[Document]:
        found = []
        while not self.queue.empty():
            found.append(self.queue.get_nowait())
        return found


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def watching(agents_dir: Path, recorder: Recorder) -> AsyncIterator[FileSource]:
    source = await asyncio.to_thread(FileSource, agents_dir)  # as the factories make it
    await source.start(recorder)
    assert recorder.delivered() == []
    yield source
    await source.stop()


def summary(document: Document) -> tuple[str, str | None, str, str | None]:
    return document.key, document.text, document.fmt, document.error


async def test_the_first_load_hands_over_agent_files_only(
    agents_dir: Path, recorder: Recorder
) -> None:
    files = {
        "b.yaml": "name: b\n",
        "a.json": '{"name": "a"}',
        "c.YML": "name: c\n",
        ".hidden.yaml": "name: hidden\n",
        "notes.txt": "not an agent",
        "b.yaml~": "an editor backup",
        "b.yaml.swp": "an editor swap file",
    }
    for name, text in files.items():
        (agents_dir / name).write_text(text, encoding="utf-8")
    (agents_dir / "sub.yaml").mkdir()
    source = await asyncio.to_thread(FileSource, agents_dir)  # as the factories make it
    await source.start(recorder)
    await source.stop()
    first = recorder.delivered()
    assert [summary(d) for d in first] == [
        ("a.json", '{"name": "a"}', "json", None),
        ("b.yaml", "name: b\n", "yaml", None),
        ("c.YML", "name: c\n", "yaml", None),
    ]
    assert {(d.info.kind, d.info.location) for d in first} == {
        ("file", str((agents_dir / name).resolve())) for name in ("a.json", "b.yaml", "c.YML")
    }


async def test_a_missing_folder_is_an_error(tmp_path: Path, recorder: Recorder) -> None:
    with pytest.raises(FileNotFoundError, match=r"agents folder .* does not exist"):
        source = await asyncio.to_thread(FileSource, tmp_path / "nowhere")
        await source.start(recorder)


@pytest.mark.usefixtures("watching")
async def test_writes_and_deletes_become_documents(agents_dir: Path, recorder: Recorder) -> None:
    path = agents_dir / "bot.yaml"
    path.write_text("name: bot\n", encoding="utf-8")
    assert summary(await recorder.next()) == ("bot.yaml", "name: bot\n", "yaml", None)
    path.write_text("name: bot\nv: 2\n", encoding="utf-8")
    assert summary(await recorder.next()) == ("bot.yaml", "name: bot\nv: 2\n", "yaml", None)
    path.unlink()
    assert summary(await recorder.next()) == ("bot.yaml", None, "yaml", None)


@pytest.mark.usefixtures("watching")
async def test_a_save_without_a_change_is_not_handed_over(
    agents_dir: Path, recorder: Recorder
) -> None:
    path = agents_dir / "bot.yaml"
    path.write_text("name: bot\n", encoding="utf-8")
    await recorder.next()
    path.write_text("name: bot\n", encoding="utf-8")  # saved again, same text
    (agents_dir / "other.yaml").write_text("name: other\n", encoding="utf-8")
    assert (await recorder.next()).key == "other.yaml"
    assert recorder.delivered() == []


@pytest.mark.usefixtures("watching")
async def test_an_atomic_save_hands_over_only_the_final_file(
    agents_dir: Path, recorder: Recorder
) -> None:
    temporary = agents_dir / ".bot.yaml.tmp"
    temporary.write_text("name: bot\n", encoding="utf-8")
    os.replace(temporary, agents_dir / "bot.yaml")
    assert summary(await recorder.next()) == ("bot.yaml", "name: bot\n", "yaml", None)


@pytest.mark.usefixtures("watching")
async def test_a_rename_hands_over_the_removal_first(agents_dir: Path, recorder: Recorder) -> None:
    old = agents_dir / "z-bot.yaml"
    old.write_text("name: bot\n", encoding="utf-8")
    await recorder.next()
    old.rename(agents_dir / "a-bot.yaml")
    assert [summary(await recorder.next()) for _ in range(2)] == [
        ("z-bot.yaml", None, "yaml", None),
        ("a-bot.yaml", "name: bot\n", "yaml", None),
    ]


@pytest.mark.usefixtures("watching")
async def test_unreadable_files_are_documents_with_an_error(
    agents_dir: Path, recorder: Recorder
) -> None:
    (agents_dir / "big.yaml").write_text("x" * (MAX_FILE_BYTES + 1), encoding="utf-8")
    assert summary(await recorder.next()) == (
        "big.yaml",
        None,
        "yaml",
        f"file larger than {MAX_FILE_BYTES} bytes",
    )
    (agents_dir / "latin1.yaml").write_bytes("name: café\n".encode("latin-1"))
    document = await recorder.next()
    assert (document.key, document.text) == ("latin1.yaml", None)
    assert document.error is not None
    assert document.error.startswith("cannot read the file: 'utf-8' codec can't decode")


@pytest.mark.usefixtures("watching")
async def test_a_failing_callback_does_not_stop_the_watch(
    agents_dir: Path, recorder: Recorder
) -> None:
    recorder.fail_on.add("first.yaml")
    (agents_dir / "first.yaml").write_text("name: first\n", encoding="utf-8")
    assert (await recorder.next()).key == "first.yaml"
    (agents_dir / "second.yaml").write_text("name: second\n", encoding="utf-8")
    assert (await recorder.next()).key == "second.yaml"


@pytest.mark.usefixtures("watching")
async def test_a_burst_of_writes_ends_on_the_last_text(
    agents_dir: Path, recorder: Recorder
) -> None:
    path = agents_dir / "bot.yaml"
    for n in range(10):
        path.write_text(f"name: bot\nn: {n}\n", encoding="utf-8")
    while (await recorder.next()).text != "name: bot\nn: 9\n":
        pass  # intermediate texts may or may not be seen, depending on timing
    (agents_dir / "other.yaml").write_text("name: other\n", encoding="utf-8")
    assert (await recorder.next()).key == "other.yaml"  # nothing stale after the last text


@pytest.mark.usefixtures("watching")
async def test_deleting_an_unreadable_file_is_handed_over(
    agents_dir: Path, recorder: Recorder
) -> None:
    big = agents_dir / "big.yaml"
    big.write_text("x" * (MAX_FILE_BYTES + 1), encoding="utf-8")
    assert (await recorder.next()).error is not None
    big.unlink()  # the refused document is gone: whoever applied the error must hear of it
    assert summary(await recorder.next()) == ("big.yaml", None, "yaml", None)


async def test_deleted_files_are_forgotten(agents_dir: Path, recorder: Recorder) -> None:
    """The source remembers the text of the files there are, not of every file there was."""
    source = await asyncio.to_thread(FileSource, agents_dir)  # as the factories make it
    await source.start(recorder)
    try:
        for n in range(5):
            path = agents_dir / f"bot-{n}.yaml"
            path.write_text("name: bot\n", encoding="utf-8")
            await recorder.next()
            path.unlink()
            assert (await recorder.next()).text is None
        (agents_dir / "kept.yaml").write_text("name: kept\n", encoding="utf-8")
        await recorder.next()
        assert sorted(p.name for p in source._seen) == ["kept.yaml"]
    finally:
        await source.stop()
