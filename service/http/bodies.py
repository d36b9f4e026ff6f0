"""Reading JSON request bodies strictly: content type, UTF-8, depth, schema."""

from __future__ import annotations

import json
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from ..exceptions import BadRequest, DynagentError, ErrorKind
from ..spec import issues_from

Body = TypeVar("Body", bound=BaseModel)
MAX_DEPTH = 64


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


async def read_body(request: web.Request, model: type[Body]) -> Body:
    if request.content_type != "application/json":
        raise web.HTTPUnsupportedMediaType(reason="send the body as application/json")
    raw = await request.read()
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadRequest("the body is not valid UTF-8") from None
    except RecursionError:
        raise BadRequest(f"the body nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if _depth(data) > MAX_DEPTH:
        raise BadRequest(f"the body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        details = "; ".join(str(issue) for issue in issues_from(exc))
        raise BadRequest(f"invalid request body: {details}") from None
