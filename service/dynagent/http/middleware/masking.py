"""The last stop before a response leaves: known secrets masked in its body.

Run events are masked where they are made (``Agent``), which covers streams and
traces; this catches what is built from other values — a run's final output in a JSON
answer, a status, an error message, the metrics text.
"""

from __future__ import annotations

from aiohttp import web

from dynagent.masking import SecretValues


def mask_body(response: web.StreamResponse, secrets: SecretValues) -> web.StreamResponse:
    """``response`` with the known secrets in its whole body masked (a stream is masked
    event by event where it is made)."""
    if len(secrets) and isinstance(response, web.Response) and isinstance(response.body, bytes):
        try:
            text = response.body.decode()
        except UnicodeDecodeError:
            return response
        masked = secrets.mask(text)
        if masked != text:
            response.body = masked.encode()
    return response
