"""Reading JSON request bodies strictly: content type, UTF-8, depth, schema."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, TypeVar

from aiohttp import web
from pydantic import ValidationError

from dynagent.exceptions import BadRequest, DynagentError, ErrorKind
from dynagent.http.api.schemas import CallerBody
from dynagent.spec._documents import not_unicode
from dynagent.spec.agent import issues_from

Body = TypeVar("Body", bound=CallerBody)
MAX_DEPTH = 64
BODY_TIMEOUT = 30.0
"""Seconds a client has to send its whole body. aiohttp has no such limit: a client that
sends headers and then trickles (or stops) its body would hold the request forever."""


class UnsupportedMediaType(DynagentError):
    kind: ErrorKind = "bad_request"


def _depth(value: Any) -> int:
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_DEPTH:
            return level
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def unpaired_surrogate(raw: bytes) -> tuple[str, str] | None:
    """Where a JSON body first escapes an unpaired UTF-16 surrogate (``"\\ud800"``): its
    path (``messages.0.content``; ``""`` for the body itself) and the surrogate, shown as
    written; None when it escapes none. Such a string parses, but is not text: no model
    or store can take it, and it fails wherever it goes next. Only a body that escapes a
    surrogate at all (a rare ``\\ud`` in it) is parsed to look."""
    if b"\\ud" not in raw and b"\\uD" not in raw:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None  # not JSON: refused for that
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            bad = not_unicode(item)
            if bad is not None:
                return path, bad
        elif isinstance(item, dict):
            for key, value in item.items():
                where = f"{path}.{key}" if path else str(key)
                stack.append((key, where))
                stack.append((value, where))
        elif isinstance(item, list):
            stack.extend((value, f"{path}.{i}" if path else str(i)) for i, value in enumerate(item))
    return None


async def read_body(request: web.Request, model: type[Body]) -> Body:
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(reason="send the body as application/json")
    raw = await _read(request)
    unpaired = unpaired_surrogate(raw)
    if unpaired is not None:
        path, bad = unpaired
        where = f"{path} holds" if path else "the body holds"
        raise BadRequest(f"{where} {bad}, which is not valid Unicode", param=path or None)
    # Each level opens with a bracket: a body with few of them is not too deep. A body
    # that pydantic parses and validates in one pass is the body the checks below accept;
    # any other takes them, for their messages.
    if raw.count(b"{") + raw.count(b"[") <= MAX_DEPTH:
        try:
            return model.model_validate_json(raw)
        except ValidationError:
            pass
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("the body is not valid UTF-8") from None
    except RecursionError:
        raise BadRequest(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    except ValueError:  # an integer past the interpreter's digit limit: quadratic to read
        limit = sys.get_int_max_str_digits()
        raise BadRequest(f"the body holds a number of more than {limit} digits") from None
    if raw.count(b"{") + raw.count(b"[") > MAX_DEPTH and _depth(data) > MAX_DEPTH:
        raise BadRequest(f"the body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        issues = issues_from(exc)
        details = "; ".join(str(issue) for issue in issues)
        param = issues[0].path if issues else None
        raise BadRequest(f"invalid request body: {details}", param=param or None) from None


async def _read(request: web.Request) -> bytes:
    try:
        if request.content.is_eof():  # it all came with the headers: no timer to set
            return await request.read()
        async with asyncio.timeout(BODY_TIMEOUT):
            return await request.read()
    except TimeoutError:
        raise web.HTTPRequestTimeout(
            reason=f"the body did not arrive within {BODY_TIMEOUT:g} s"
        ) from None
    except web.RequestPayloadError as exc:  # a bad Content-Encoding, broken chunks
        cause = exc.__cause__ or exc
        text = str(getattr(cause, "message", "") or cause).strip()
        raise BadRequest(f"the body could not be read: {text}") from None
    except ConnectionResetError:
        raise BadRequest("the client closed the connection before the body ended") from None


async def read_raw(request: web.Request) -> bytes:
    """The body as bytes, read within ``BODY_TIMEOUT`` (for protocols that answer a bad
    body in their own error shape, such as A2A's JSON-RPC)."""
    return await _read(request)
