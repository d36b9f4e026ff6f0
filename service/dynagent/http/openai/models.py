"""``GET /v1/models`` and ``GET /v1/models/{id}``: the agents a key may use, in
OpenAI's shape, so that UIs and clients discover them (``name@canary`` while a
canary serves)."""

from __future__ import annotations

from aiohttp import web

from dynagent.core.routing import split_model_name
from dynagent.exceptions import NotFound
from dynagent.http._routes import Route, Routes
from dynagent.http.openai.schemas import ModelList, ModelObject, OpenAIError
from dynagent.http.sse import json
from dynagent.http.state import caller, service
from dynagent.registry.entry import AgentEntry

routes = Routes("openai", error_body=OpenAIError)
MODEL_ID = "^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?(@(stable|canary))?$"
"""An agent name, perhaps with the variant: ``name@canary``."""


def _model(model_id: str, created: float) -> ModelObject:
    return ModelObject(id=model_id, object="model", created=int(created), owned_by="dynagent")


def _models(entry: AgentEntry) -> list[ModelObject]:
    if entry.stable is None:
        return []
    models = [_model(entry.name, entry.loaded_at)]
    if entry.canary is not None and entry.canary.serving:
        models.append(_model(f"{entry.name}@canary", entry.canary.loaded_at))
    return models


@routes.add(
    Route(
        "GET",
        "/v1/models",
        "The agents the key may use, as models",
        response=ModelList,
        errors=(401,),
    )
)
async def list_models(request: web.Request) -> web.Response:
    who = caller(request)
    data = [m for e in service(request).registry if who.may_see(e.name) for m in _models(e)]
    return json(ModelList(object="list", data=data))


@routes.add(
    Route(
        "GET",
        "/v1/models/{model_id}",
        "One agent as a model",
        path_patterns={"model_id": MODEL_ID},
        response=ModelObject,
        errors=(400, 401, 403, 404),
    )
)
async def get_model(request: web.Request) -> web.Response:
    model_id = request.match_info["model_id"]
    name, _ = split_model_name(model_id)
    caller(request).check_agent(name)
    registry = service(request).registry
    wanted = name if model_id.endswith("@stable") else model_id  # name@stable is the name
    found = [m for m in _models(registry.entry(name)) if m.id == wanted]
    if not found:
        raise NotFound(f"the model {model_id!r} does not exist; GET /v1/models lists them")
    return json(found[0].model_copy(update={"id": model_id}))
