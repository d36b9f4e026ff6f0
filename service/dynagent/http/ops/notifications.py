"""``GET /v1/notifications``: each webhook's deliveries, failures and last error."""

from __future__ import annotations

from aiohttp import web

from dynagent.exceptions import Forbidden
from dynagent.http._routes import Route, Routes
from dynagent.http.api.schemas import Answer
from dynagent.http.sse import json
from dynagent.http.state import caller, service

routes = Routes("notifications")


class WebhookStatus(Answer):
    url: str
    """Scheme, host and path: never a query or credentials."""
    events: list[str]
    format: str
    signed: bool
    pending: int
    delivered: int
    failed: int
    """Notices given up on after their attempts."""
    dropped: int
    """Notices not queued: the queue was full (a receiver down for long)."""
    retried: int
    last_error: str | None
    last_error_at: float | None


class NotificationsStatus(Answer):
    webhooks: list[WebhookStatus]


@routes.add(
    Route(
        "GET",
        "/v1/notifications",
        "Webhook deliveries and failures (admin key)",
        response=NotificationsStatus,
        errors=(401, 403),
    )
)
async def notifications(request: web.Request) -> web.Response:
    if not caller(request).admin:
        raise Forbidden("the notifications' status needs an admin API key")
    webhooks = service(request).webhooks
    shown = [] if webhooks is None else webhooks.status()
    return json(NotificationsStatus(webhooks=[WebhookStatus.model_validate(w) for w in shown]))
