"""Stored Responses (``store: true``), read and deleted as in OpenAI's API: ``GET`` and
``DELETE /v1/responses/{id}`` and ``GET /v1/responses/{id}/input_items``. Each is
reached only by the key that created it and by admins; to anyone else it does not
exist (404, as for an id never stored)."""

from __future__ import annotations

from aiohttp import web

from dynagent.core.response_store import StoredResponse
from dynagent.exceptions import BadRequest
from dynagent.http._routes import Param, Route, Routes
from dynagent.http.openai.responses_items import input_items
from dynagent.http.openai.schemas import (
    OpenAIError,
    ResponseDeleted,
    ResponseItemList,
    ResponseObject,
)
from dynagent.http.query import whole_number
from dynagent.http.sse import json
from dynagent.http.state import caller, service

routes = Routes("openai", error_body=OpenAIError)

MAX_ITEMS = 100


async def _stored(request: web.Request) -> StoredResponse:
    responses, response_id = service(request).responses, request.match_info["response_id"]
    return await responses.find(response_id, caller(request))


@routes.add(
    Route(
        "GET",
        "/v1/responses/{response_id}",
        "A stored response (created with store: true by the same key; an admin reads any)",
        response=ResponseObject,
        errors=(401, 404),
    )
)
async def get_response(request: web.Request) -> web.Response:
    stored = await _stored(request)
    return json(ResponseObject.model_validate(stored.body), compact=True)


@routes.add(
    Route(
        "DELETE",
        "/v1/responses/{response_id}",
        "Delete a stored response: it can no longer be read or continued "
        "(previous_response_id), on any replica",
        response=ResponseDeleted,
        errors=(401, 404, 503),
    )
)
async def delete_response(request: web.Request) -> web.Response:
    response_id = request.match_info["response_id"]
    await service(request).responses.forget(response_id, caller(request))
    return json(ResponseDeleted(id=response_id, object="response", deleted=True), compact=True)


@routes.add(
    Route(
        "GET",
        "/v1/responses/{response_id}/input_items",
        "The items a stored response answered: its conversation, without the answer",
        parameters=(
            Param(
                "order",
                "query",
                "desc (the default): newest first; asc: oldest first",
                {"type": "string", "enum": ["asc", "desc"]},
            ),
            Param(
                "limit",
                "query",
                f"At most this many (1 to {MAX_ITEMS}, default 20)",
                {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS},
            ),
            Param("after", "query", "Only the items after the one of this id, in this order"),
            Param("include", "query", "Accepted; the items carry all they have"),
        ),
        response=ResponseItemList,
        errors=(400, 401, 404),
    )
)
async def list_input_items(request: web.Request) -> web.Response:
    query = request.query
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise BadRequest("order must be asc or desc", param="order")
    limit = whole_number(query.get("limit"), "limit", default=20, most=MAX_ITEMS)
    stored = await _stored(request)
    items = input_items(stored.body["id"], stored.messages[:-1])
    if order == "desc":
        items.reverse()
    after = query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise BadRequest(f"after: no item {after!r} in this response", param="after")
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return json(
        ResponseItemList(
            object="list",
            data=page,
            first_id=page[0]["id"] if page else None,
            last_id=page[-1]["id"] if page else None,
            has_more=len(items) > limit,
        ),
        compact=True,
    )
