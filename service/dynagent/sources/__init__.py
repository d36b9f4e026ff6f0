"""Config sources: a local folder (watchdog) and Nacos."""

from dynagent.sources.base import ConfigSource, Document, OnChange
from dynagent.sources.files import FileSource

__all__ = ["ConfigSource", "Document", "FileSource", "OnChange"]
