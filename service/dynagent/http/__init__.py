"""The HTTP API (aiohttp): our own endpoints and an OpenAI-compatible one."""

from dynagent.http.app import create_app

__all__ = ["create_app"]
