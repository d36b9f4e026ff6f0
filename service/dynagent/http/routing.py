"""Every route table the app serves, in the order they are added."""

from __future__ import annotations

from aiohttp import web

from dynagent.http import a2a
from dynagent.http._routes import Routes
from dynagent.http.api import agents, evals, feedback
from dynagent.http.openai import chat, models, responses
from dynagent.http.ops import admin, live, mcp, probes, traces, ui

TABLES: tuple[Routes, ...] = (
    probes.routes,
    agents.routes,
    admin.routes,
    feedback.routes,
    evals.routes,
    chat.routes,
    models.routes,
    responses.routes,
    a2a.routes,
    mcp.routes,
    ui.routes,
    traces.routes,
    live.routes,
)


def install(app: web.Application) -> None:
    for table in TABLES:
        app.add_routes(table)
