"""A config of a Nacos group as the document a source hands on."""

from __future__ import annotations

from dynagent.nacos.client import ConfigRead, NacosClient, content_md5
from dynagent.runtime._health import SourceHealth
from dynagent.runtime.agent import SourceInfo
from dynagent.sources.base import Document
from dynagent.spec.agent import format_of


def config_document(
    namespace: str,
    group: str,
    data_id: str,
    read: ConfigRead | None,
    health: SourceHealth,
    *,
    from_snapshot: bool = False,
) -> Document:
    """``read`` (None: deleted) with the details each agent's status shows: where it is,
    the md5 and gray marker Nacos reported, and whether it came from the snapshot."""
    details = {"namespace": namespace, "group": group, "data_id": data_id}
    if read is not None:
        details["md5"] = read.md5 or content_md5(read.content)
        if read.gray:
            details["gray"] = read.gray
    if from_snapshot:
        details["from"] = "snapshot"
    info = SourceInfo("nacos", f"{namespace}/{group}/{data_id}", details, health)
    text = read.content if read is not None else None
    return Document(data_id, text, format_of(data_id), info)


async def annotated(client: NacosClient, group: str, data_id: str, content: str) -> ConfigRead:
    """A pushed content with the md5, gray marker and modification time Nacos reports for
    it; or, when the server holds another version by now, that one: the pushed content's
    time is unknown, and served it could be older than the version applied (``_order``)."""
    read = await client.read(data_id, group)
    if read is not None:
        return read
    return ConfigRead(content, content_md5(content))


async def refused(document: Document) -> bool:
    """What a source hands documents to before it starts: nothing is accepted."""
    return False
