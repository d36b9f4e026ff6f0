"""A fleet whose canaries are judged from a real Prometheus: two ``dynagent serve``
replicas behind nginx (``scripts/fleet.sh``, with Nacos and Redis), Prometheus scraping
both (``scripts/prometheus.sh``), API keys (an admin key for the decisions a person
makes), and a webhook receiver on loopback that every replica notifies.

    with analysed_fleet(home) as fleet:  # a module fixture
        ...  # publish_canary(fleet, nacos, http, model_server, "bot", weight=50, analysis=...)

A scenario is a canary published with its ``rollout`` (``publish_canary``), a load
(``fleet_load``, ``driven``) and a condition on every replica (``fleet.everywhere``,
``until_paused``); a budget's pause is one more of them: a canary on ``PRICED_MODEL``,
which every replica's ``models.prices`` prices, then ``until_paused(..., by="budget")``.
"""

from __future__ import annotations

import hmac
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

from .canary import Load, canary_document, canary_revision
from .fleet import Fleet, until
from .nacos import NacosAdmin, yaml_text
from .prometheus import prometheus_running
from .scripted_model import ScriptedModelServer
from .service import agent_document, revision_of
from .threaded import served_in_thread

ADMIN = "release-manager"
"""The admin key's name: who a decision by hand is recorded as."""
ADMIN_KEY = "admin-key-for-the-analysed-fleet"
CALLER_KEY = "caller-key-for-the-analysed-fleet"
WEBHOOK_SECRET = "webhook-secret-of-the-analysed-fleet"
SECRET_VARIABLE = "FLEET_WEBHOOK_SECRET"
SCRAPE = "500ms"
"""Prometheus's scrape and rule evaluation interval: short, so that a check sees the
requests of the last second."""
NO_GUARD = {"max_error_rate": 1.0, "max_latency_ratio": 1000}
"""The fixed-threshold guard out of the way: the analysis judges these canaries."""
PRICED_MODEL = "priced-canary"
PRICE = {"input": 400.0, "output": 1600.0}
"""``models.prices`` of ``PRICED_MODEL`` in every replica's config (US dollars per million
tokens): dear, so that a budget of cents is spent by tens of requests."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One webhook POST as the receiver got it."""

    headers: dict[str, str]
    body: bytes

    @property
    def notice(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data

    def signed(self, secret: str) -> bool:
        """Whether ``X-Dynagent-Signature`` is the HMAC-SHA256 of the body under ``secret``."""
        expected = "sha256=" + hmac.new(secret.encode(), self.body, sha256).hexdigest()
        return hmac.compare_digest(self.headers.get("X-Dynagent-Signature", ""), expected)


@dataclass
class Receiver:
    """Takes every webhook POST (200) and keeps it."""

    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def app(self) -> web.Application:
        async def take(request: web.Request) -> web.Response:
            delivery = Delivery(dict(request.headers), await request.read())
            with self._lock:
                self.deliveries.append(delivery)
            return web.json_response({"ok": True})

        app = web.Application()
        app.router.add_post("/hooks", take)
        return app

    def of_agent(self, name: str) -> list[Delivery]:
        with self._lock:
            return [d for d in self.deliveries if d.notice.get("agent") == name]


@dataclass(frozen=True)
class AnalysedFleet:
    fleet: Fleet
    prometheus_url: str
    receiver: Receiver

    @property
    def url(self) -> str:
        """nginx: where callers and operators go."""
        return self.fleet.url

    @property
    def replica_urls(self) -> list[str]:
        return [self.fleet.replica_url(n) for n in range(1, self.fleet.replicas + 1)]

    @property
    def caller(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {CALLER_KEY}"}

    @property
    def admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ADMIN_KEY}"}

    def analysis(self, **fields: Any) -> dict[str, Any]:
        """``rollout.analysis`` reading this fleet's Prometheus."""
        return {"prometheus": {"url": self.prometheus_url}, **fields}

    async def get(self, http: aiohttp.ClientSession, url: str) -> Any:
        async with http.get(url, headers=self.admin) as response:
            return await response.json() if response.status == 200 else None

    async def statuses(self, http: aiohttp.ClientSession, name: str) -> list[dict[str, Any]]:
        """``name``'s status on each replica (``{}`` where it is not served)."""
        found = [await self.get(http, f"{url}/v1/agents/{name}") for url in self.replica_urls]
        return [s or {} for s in found]

    async def everywhere(
        self,
        http: aiohttp.ClientSession,
        name: str,
        holds: Callable[[dict[str, Any]], bool],
        what: str,
        within: float = 30,
    ) -> list[dict[str, Any]]:
        """Once ``holds`` is true of ``name``'s status on every replica, those statuses."""
        found: list[dict[str, Any]] = []

        async def check() -> bool:
            nonlocal found
            found = await self.statuses(http, name)
            return all(holds(s) for s in found)

        await until(check, within, f"{what} on every replica")
        return found

    async def history(self, http: aiohttp.ClientSession, name: str) -> list[dict[str, Any]]:
        """The canary's trail of decisions, read through nginx."""
        found = await self.get(http, f"{self.url}/v1/agents/{name}/rollout/history")
        assert found is not None and found["canary"] is not None, found
        entries: list[dict[str, Any]] = found["canary"]["entries"]
        return entries

    async def webhooks_settled(self, http: aiohttp.ClientSession) -> None:
        """Wait until no replica has a notice left to send and every delivery the
        replicas counted has reached the receiver: nothing more is on its way."""

        async def check() -> bool:
            hooks = [
                hook
                for url in self.replica_urls
                for hook in (await self.get(http, f"{url}/v1/notifications"))["webhooks"]
            ]
            sent = sum(h["delivered"] for h in hooks)
            return all(h["pending"] == 0 for h in hooks) and sent == len(self.receiver.deliveries)

        await until(check, 30, "the webhooks' deliveries")


def service_extra(home: Path, receiver: Receiver) -> str:
    """The replicas' further service config: keys, public metrics, the webhook."""
    keys = home / "keys.yaml"
    keys.write_text(
        yaml.safe_dump(
            {
                "keys": [
                    {"name": ADMIN, "key": ADMIN_KEY, "admin": True},
                    {"name": "caller", "key": CALLER_KEY},
                ]
            }
        )
    )
    webhook = {"url": f"{receiver.url}/hooks", "secret_env": SECRET_VARIABLE}
    extra = {
        "auth": {"keys_file": str(keys)},
        "metrics": {"public": True},  # Prometheus scrapes without a key
        "notifications": {"webhooks": [{**webhook, "retry_seconds": 0.2}]},
        "models": {"prices": {PRICED_MODEL: PRICE}},
    }
    return yaml.safe_dump(extra, sort_keys=False)


@contextmanager
def analysed_fleet(home: Path, replicas: int = 2) -> Iterator[AnalysedFleet]:
    """The fleet, its Prometheus and the webhook receiver, up for the block."""
    receiver = Receiver()
    with served_in_thread(receiver.app) as served:
        receiver.url = served.url
        home.mkdir(parents=True, exist_ok=True)
        with Fleet.on_free_ports(
            home / "fleet",
            replicas,
            service_extra=service_extra(home, receiver),
            extra_environ={SECRET_VARIABLE: WEBHOOK_SECRET},
        ) as fleet:
            fleet.up()
            targets = [fleet.replica_url(n).removeprefix("http://") for n in range(1, replicas + 1)]
            with prometheus_running(home / "prometheus", targets, SCRAPE) as url:
                yield AnalysedFleet(fleet, url, receiver)


async def publish_canary(
    fleet: AnalysedFleet,
    nacos: NacosAdmin,
    http: aiohttp.ClientSession,
    model_server: ScriptedModelServer,
    name: str,
    canary_model: str | None = None,
    **rollout: Any,
) -> str:
    """``name`` on the default model, and its canary on model ``canary_model`` (default
    ``{name}-canary``) with ``rollout``; returns once every replica serves both. The
    canary's revision."""
    stable = agent_document(name, model_server, system="Stable.", model={"retries": 0})
    model = {"name": canary_model or f"{name}-canary", "retries": 0}
    candidate = agent_document(name, model_server, system="Canary.", model=model)
    group = fleet.fleet.group
    await nacos.publish(f"{name}.agent.yaml", group, yaml_text(stable))
    await fleet.everywhere(http, name, lambda s: s.get("revision") == revision_of(stable), "stable")
    weight = rollout.pop("weight", None) or rollout["steps"][0]
    document = canary_document(candidate, weight, guard=NO_GUARD, **rollout)
    await nacos.publish(f"{name}.canary.yaml", group, yaml_text(document))
    revision = canary_revision(candidate)
    await fleet.everywhere(
        http, name, lambda s: (s.get("canary") or {}).get("revision") == revision, "the canary"
    )
    return revision


def paused_by(by: str) -> Any:
    def holds(status: dict[str, Any]) -> bool:
        pulled = (status.get("canary") or {}).get("pulled") or {}
        return bool(pulled.get("recorded")) and pulled.get("by") == by

    return holds


async def until_paused(
    fleet: AnalysedFleet, http: aiohttp.ClientSession, name: str, by: str, within: float = 120
) -> list[dict[str, Any]]:
    """Every replica's status of ``name`` once its canary's pause by ``by`` is recorded
    and served there."""
    return await fleet.everywhere(http, name, paused_by(by), f"the pause by {by}", within)


def canary_state(state: str) -> Any:
    def holds(status: dict[str, Any]) -> bool:
        return bool((status.get("canary") or {}).get("state") == state)

    return holds


def checked(status: dict[str, Any]) -> bool:
    """The replica has made a first check of the canary (its figures' starting point)."""
    return (status.get("analysis") or {}).get("checked_at") is not None


def fleet_load(
    fleet: AnalysedFleet, name: str, *, paced: bool = False, headers: dict[str, str] | None = None
) -> Load:
    """Callers of ``name`` through nginx; ``paced``: two, each resting 100 ms between
    requests (at most 20 a second, whatever the machine)."""
    return Load(
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)),
        f"{fleet.url}/v1/agents/{name}/invoke",
        workers=2 if paced else 4,
        limit=5000,
        headers={**fleet.caller, **(headers or {})},
        pause=0.1 if paced else 0.0,
    )


async def driven(load: Load, until_done: Callable[[], Awaitable[None]]) -> None:
    """Keep ``load`` going until ``until_done()`` returns."""
    try:
        async with load:
            await until_done()
    finally:
        await load.session.close()


async def per_instance(
    http: aiohttp.ClientSession, fleet: AnalysedFleet, name: str, at: float
) -> dict[str, int]:
    """Each replica's count of canary runs in Prometheus at time ``at``."""
    series = f'dynagent_rollout_requests_total{{agent="{name}",variant="canary"}}'
    query = f"sum by (instance) (last_over_time({series}[1m]))"
    async with http.get(
        f"{fleet.prometheus_url}/api/v1/query", params={"query": query, "time": str(at)}
    ) as response:
        body = await response.json()
    return {r["metric"]["instance"]: round(float(r["value"][1])) for r in body["data"]["result"]}


async def up_of(http: aiohttp.ClientSession, fleet: AnalysedFleet, instance: str) -> float | None:
    """Prometheus's latest ``up`` of ``instance``: 1 scraped, 0 its last scrape failed."""
    async with http.get(
        f"{fleet.prometheus_url}/api/v1/query", params={"query": f'up{{instance="{instance}"}}'}
    ) as response:
        result = (await response.json())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


async def equals(value: Any, expected: float) -> bool:
    return bool(await value == expected)


async def replica_spend(
    http: aiohttp.ClientSession, fleet: AnalysedFleet, name: str
) -> list[float]:
    """What each replica says (its own ``/metrics``) the canary of ``name`` spent, in US
    dollars."""
    spent: list[float] = []
    for url in fleet.replica_urls:
        async with http.get(f"{url}/metrics") as response:
            text = await response.text()
        series = f'dynagent_cost_usd_total{{agent="{name}",'
        spent.append(
            sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith(series) and 'variant="canary"' in line
            )
        )
    return spent
