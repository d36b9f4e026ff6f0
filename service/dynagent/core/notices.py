"""The service's webhooks: made from ``notifications.webhooks`` and told every rollout
change of the registry as a notice."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dynagent.config import ServiceConfig
from dynagent.core.metrics import Metrics
from dynagent.masking import SecretValues
from dynagent.notifications import Notice, Webhooks, notice_of
from dynagent.notifications.claims import RedisClaims
from dynagent.registry.events import AgentSwapped, CanaryRemoved, RegistryEvent
from dynagent.registry.facade import AgentRegistry


def attach_webhooks(  # noqa: PLR0917 - the parts of a service it uses
    config: ServiceConfig,
    environ: Mapping[str, str],
    metrics: Metrics,
    secrets: SecretValues,
    registry: AgentRegistry,
    notify: Callable[[Notice], None],
) -> Webhooks | None:
    """The configured webhooks, if any, told every rollout change of ``registry`` through
    ``notify``; a fleet sharing a Redis sends each notice from the replica that claims it."""
    if not config.notifications.webhooks:
        return None
    sessions = config.sessions
    claim = RedisClaims(sessions.url, sessions.key_prefix) if sessions.store == "redis" else None
    counter = metrics.webhooks
    webhooks = Webhooks(
        config.notifications,
        environ,
        claim=claim,
        on_result=lambda result: counter.labels(result).inc(),
    )
    secrets.add(webhooks.secrets)

    def told(event: RegistryEvent) -> None:
        notice = notice_of(event)
        if isinstance(event, CanaryRemoved) and event.name in registry:
            stable = registry.entry(event.name).stable
            if stable is not None and stable.revision == event.revision:
                notice = Notice("promote", event.name, event.revision)  # it became the stable
        if notice is not None:
            notify(notice)
        if isinstance(event, AgentSwapped):
            # A promotion is two changes, and a replica may read the canary's removal
            # before its new stable definition: the promotion shows only now. Told twice
            # (both orders on different replicas), it is one delivery id, sent once.
            ended = registry.rollouts.ended.get(event.name)
            if ended is not None and ended["revision"] == event.revision:
                notify(Notice("promote", event.name, event.revision))

    registry.listeners.append(told)
    return webhooks
