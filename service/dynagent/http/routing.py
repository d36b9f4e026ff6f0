"""Every route table the app serves, in the order they are added."""

from __future__ import annotations

from aiohttp import web

from dynagent.http import a2a
from dynagent.http._routes import Routes
from dynagent.http.api import agents, evals, feedback, sessions
from dynagent.http.openai import chat, models, responses, responses_kept
from dynagent.http.ops import admin, capture, live, mcp, notifications, probes, traces, ui

TABLES: tuple[Routes, ...] = (
    probes.routes,
    agents.routes,
    sessions.routes,
    admin.routes,
    feedback.routes,
    evals.routes,
    chat.routes,
    models.routes,
    responses.routes,
    responses_kept.routes,
    a2a.routes,
    mcp.routes,
    ui.routes,
    traces.routes,
    live.routes,
    capture.routes,
    notifications.routes,
)


def install(app: web.Application) -> None:
    for table in TABLES:
        app.add_routes(table)
