"""Config sources: a local folder (watchdog) and Nacos."""

from .base import ConfigSource, Document, OnChange
from .files import FileSource

__all__ = ["ConfigSource", "Document", "FileSource", "OnChange"]
