"""The service: everything a running Dynagent owns, with no HTTP in it.

A ``Service`` is built from the service config and started with ``running()``; every
protocol adapter (our API, the OpenAI routes, A2A, the operations routes) and any
program that embeds Dynagent runs agents through ``run_agent``/``stream_agent`` of
``dynagent.core.runs`` on it. Resources are opened in ``running()`` and closed in
reverse order when it ends.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

from dynagent._compat import check_all as check_dependencies
from dynagent.a2a.nacos_registry import NacosA2aDirectory, NacosA2aRegistrar, start_registrar
from dynagent.config import ServiceConfig
from dynagent.core._assembly import configured_factories, otel_tracer, session_store, start_all
from dynagent.core.auth import ApiKeys
from dynagent.core.drain import Drain
from dynagent.core.eval_runs import EvalRuns
from dynagent.core.gate_runs import GateRuns
from dynagent.core.gauges import RegistryGauges
from dynagent.core.judging import OnlineJudge
from dynagent.core.keys_watch import KeysFileWatch
from dynagent.core.metrics import Metrics
from dynagent.core.notices import attach_webhooks
from dynagent.core.redact import Redactor
from dynagent.core.response_store import MAX_BYTES, MAX_RESPONSES, ResponseStore
from dynagent.core.run_ends import RunEnds
from dynagent.core.series import RecentSeries
from dynagent.core.shadows import ShadowRunner
from dynagent.core.shared_runs import SharedRuns
from dynagent.core.streams import StreamSlots
from dynagent.core.traces import TraceStore
from dynagent.core.tracing import RunTracer
from dynagent.factories.base import AgentBuilderFactory
from dynagent.interceptors.registry import InterceptorRegistry
from dynagent.masking import SecretValues
from dynagent.mcp.setup import mcp_servers
from dynagent.mcp.tools import McpServers
from dynagent.notifications import Notice, Webhooks
from dynagent.registry.events import (
    AgentRemoved,
    AgentSwapped,
    CanaryPulled,
    CanaryRemoved,
    CanaryStarted,
    RegistryEvent,
)
from dynagent.registry.facade import AgentRegistry
from dynagent.rollout.analyses import CanaryAnalyses
from dynagent.rollout.budgets import CanaryBudgets
from dynagent.rollout.decisions import RolloutDecisions
from dynagent.rollout.gate import CanaryGate
from dynagent.runtime.builder import AgentBuilder
from dynagent.runtime.environment import service_policy
from dynagent.runtime.resources import Resources
from dynagent.sessions.base import ReportsHealth, SessionStore
from dynagent.spec.agent import AgentSpec
from dynagent.tools.registry import ToolRegistry

FactoryMaker = Callable[[AgentBuilder, ServiceConfig], AgentBuilderFactory]
"""Makes an extra factory from the shared builder and the config."""

SERVED_CHANGES = (AgentSwapped, CanaryStarted, CanaryRemoved, CanaryPulled)
"""Events after which an agent's served versions (stable, canary) are others: the servers
their tools hold are then all it uses."""


@dataclass(eq=False)
class Service:
    """What a running Dynagent has; built by ``Service.create``, run by ``running()``."""

    config: ServiceConfig
    environ: Mapping[str, str]
    registry: AgentRegistry
    traces: TraceStore
    metrics: Metrics
    api_keys: ApiKeys
    secrets: SecretValues
    """Values masked in logs and run events: API keys, credentials from the environment."""
    drain: Drain
    """Running requests, and their deadline once the service is stopping."""
    shadows: ShadowRunner
    """Shadow runs of the canaries (``rollout.shadow``), in the background."""
    decisions: RolloutDecisions
    """Writes rollout decisions (the guard's pulls, resumes) back into canary documents."""
    responses: ResponseStore
    """Responses API answers kept for ``previous_response_id`` and reading back."""
    mcp: McpServers
    """The MCP servers agents use and their pooled sessions."""
    series: RecentSeries
    """The last 15 minutes of requests per agent, for the operations page."""
    redactor: Redactor
    """Masks what the operations views show of definitions and traces."""
    watchers: StreamSlots
    """The open ``/v1/watch/agents`` streams, in all and per key, within their limits."""
    judging: OnlineJudge = field(init=False)
    """Online scores (``rollout.judge``): sampled live runs scored in the background."""
    evals: EvalRuns = field(default_factory=EvalRuns)
    """Evaluation runs this replica started (``core/evals.py``), kept for reading back."""
    run_ends: RunEnds = field(default_factory=RunEnds)
    """Finished runs' metrics, traces, evidence and log lines, applied in batches; settled
    before anything reads them (``core/run_ends.py``)."""
    tracer: RunTracer | None = None
    """OpenTelemetry for runs; set when the ``otel`` extra is installed and configured."""
    factories: dict[str, AgentBuilderFactory] = field(default_factory=dict)
    """The running factories by name (``default``, ``nacos``, ``nacos-prompt`` …)."""
    keys_watch: KeysFileWatch | None = None
    """Present while running when ``auth.keys_file`` is set."""
    a2a_registrar: NacosA2aRegistrar | None = None
    """Present while running when ``a2a.register`` is on."""
    sessions: SessionStore | None = None
    """The conversations of every agent (``sessions``), while the agents run."""
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the service begins to stop: ``/readyz`` answers 503, responses close their
    connections and long-lived watch streams end."""
    analyses: CanaryAnalyses = field(init=False)
    """``rollout.analysis``: each canary checked against its stable version."""
    budgets: CanaryBudgets = field(init=False)
    """``rollout.budget``: each canary's spend against its budget."""
    webhooks: Webhooks | None = None
    """Rollout notices to ``notifications.webhooks``; None when none is configured."""
    _tools: ToolRegistry | None = None
    _interceptors: InterceptorRegistry | None = None
    _specs: Sequence[AgentSpec] = ()
    _extra_factories: Sequence[FactoryMaker] = ()
    gate: CanaryGate = field(init=False)
    """Runs the suites of gated canaries (``rollout.gate``) and records their results."""

    def __post_init__(self) -> None:
        # A fleet's trace is in its Redis before the run is answered: no batch to wait for.
        self.run_ends.batched = self.traces.shared is None
        settle = self.run_ends.settle
        self.traces.before_read = self.metrics.before_collect = settle
        self.registry.before_read = settle
        self.judging = OnlineJudge(self.registry, self.metrics)
        self.gate = CanaryGate(self.registry, self.decisions)
        runs = GateRuns(self.evals, self.metrics, self.registry, self.notify)
        self.gate.observers.append(runs)
        self.gate.attach()
        self.analyses = CanaryAnalyses(self.registry, self.decisions)
        self.budgets = CanaryBudgets(self.registry, self.decisions, fleet=self.traces.shared)

    @classmethod
    def create(
        cls,
        config: ServiceConfig,
        *,
        tools: ToolRegistry | None = None,
        interceptors: InterceptorRegistry | None = None,
        specs: Sequence[AgentSpec] = (),
        factories: Sequence[FactoryMaker] = (),
        environ: Mapping[str, str] | None = None,
        secrets: SecretValues | None = None,
        tracer: RunTracer | None = None,
    ) -> Service:
        """The service for ``config``; nothing is opened until ``running()``.

        ``secrets``: the set the log sink masks (``dynagent serve`` passes its own).
        ``tracer`` (default: OpenTelemetry when the ``otel`` extra is installed and
        ``OTEL_*`` asks). ``UntestedDependency`` when a dependency is installed at a
        version that was not tested."""
        check_dependencies()
        environ = os.environ if environ is None else environ
        secrets = SecretValues() if secrets is None else secrets
        registry = AgentRegistry()
        traces, responses = _run_records(config)
        metrics = Metrics()
        metrics.registry.register(RegistryGauges(registry))
        api_keys = ApiKeys.from_config(environ, config.auth)
        secrets.add(api_keys.secrets)
        # What `dynagent serve` also hands the log mask: the page masks as the logs do.
        secrets.add([config.nacos.password, environ.get("OPENAI_API_KEY", "")])
        tracer = tracer or otel_tracer(environ)
        running: dict[str, AgentBuilderFactory] = {}
        service = cls(
            config=config,
            environ=environ,
            registry=registry,
            traces=traces,
            metrics=metrics,
            api_keys=api_keys,
            secrets=secrets,
            drain=Drain(),
            shadows=ShadowRunner(registry.rollouts, metrics, traces, tracer=tracer),
            decisions=RolloutDecisions(registry.rollouts, running),
            responses=responses,
            mcp=mcp_servers(config),
            series=RecentSeries(),
            redactor=Redactor(secrets),
            watchers=StreamSlots(
                config.listen.max_watch_streams, config.listen.max_watch_streams_per_key
            ),
            tracer=tracer,
            factories=running,
            _tools=tools,
            _interceptors=interceptors,
            _specs=tuple(specs),
            _extra_factories=tuple(factories),
        )
        service._attach()
        return service

    def _attach(self) -> None:
        """Who listens to the registry: the rollout decisions, the webhooks, the metrics
        and the secrets' masks."""
        self.decisions.attach()
        registry = self.registry
        self.webhooks = attach_webhooks(
            self.config, self.environ, self.metrics, self.secrets, registry, self.notify
        )
        registry.listeners.append(self._count_change)
        registry.listeners.append(self._keep_served_secrets)

    def _keep_served_secrets(self, event: RegistryEvent) -> None:
        """A definition's values are masked while one of its versions is served: on every
        change of a name they become those of its stable and canary agents (a rebuild that
        dropped a credential drops its mask), and a removed name takes them all away."""
        name = event.name
        if isinstance(event, AgentRemoved) or name not in self.registry:
            self.secrets.forget(name)
            return
        entry = self.registry.entry(name)
        served = [entry.stable, entry.canary.agent if entry.canary else None]
        self.secrets.own(name, frozenset().union(*(a.own_secrets for a in served if a)))

    def notify(self, notice: Notice) -> None:
        """Tell the webhooks ``notice`` (a rollout decision); never waits."""
        if self.webhooks is not None:
            self.webhooks.notify(notice)

    def _count_change(self, event: RegistryEvent) -> None:
        """The registry's changes feed the metrics and the page's series; an agent gone
        lets go of the MCP sessions only it used."""
        if isinstance(event, AgentRemoved):
            self.mcp.release(event.name)
            self.metrics.forget(event.name)
            self.series.forget(event.name)
            return
        self.metrics.reloads.labels(event.name, event.kind).inc()
        if isinstance(event, SERVED_CHANGES) and event.name in self.registry:
            entry = self.registry.entry(event.name)
            served = [entry.stable, entry.canary.agent if entry.canary else None]
            held = (h for agent in served if agent for t in agent.tools.values() for h in t.holds)
            self.mcp.retain(event.name, held)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Service]:
        """Load the agents and start everything; on exit stop it all in reverse order."""
        async with AsyncExitStack() as stack:
            if self.tracer is not None:
                stack.push_async_callback(self.tracer.aclose)
            if self.webhooks is not None:
                self.webhooks.start()
                stack.push_async_callback(self.webhooks.aclose)
            stack.push_async_callback(self.traces.aclose)  # and the fleet's Redis, if shared
            await stack.enter_async_context(self._agents())
            self.decisions.start()
            stack.push_async_callback(self.decisions.aclose)
            self.analyses.start()
            stack.push_async_callback(self.analyses.aclose)
            self.budgets.start()
            stack.push_async_callback(self.budgets.aclose)
            self.gate.start()
            stack.push_async_callback(self.gate.aclose)
            stack.push_async_callback(self.shadows.aclose)
            stack.push_async_callback(self.judging.aclose)
            stack.push_async_callback(self.evals.aclose)
            stack.callback(self.run_ends.settle)  # the last runs' ends, before all of these
            if self.config.auth.keys_file is not None:
                self.keys_watch = await asyncio.to_thread(  # it looks at the file: off the loop
                    KeysFileWatch, self.api_keys, self.config.auth, self.environ, self.secrets
                )
                await stack.enter_async_context(self.keys_watch.running())
            yield self

    @asynccontextmanager
    async def _agents(self) -> AsyncIterator[None]:
        """The factories, their builder and every resource the agents share."""
        config, registry = self.config, self.registry
        resources = Resources()
        # Off the loop: opening SQLite, a new folder and the plugin scan are file I/O.
        store = await asyncio.to_thread(session_store, config)
        if isinstance(store, ReportsHealth):  # an outage shows in /readyz, as "sessions"
            store.watch_health(lambda reason: registry.readiness.set_degraded("sessions", reason))
        work_dir = await asyncio.to_thread(tempfile.mkdtemp, prefix="dynagent-a2a-directory-")
        directory = NacosA2aDirectory(config.nacos, Path(work_dir))
        tools = await asyncio.to_thread(lambda: self._tools or ToolRegistry.default())
        interceptors = await asyncio.to_thread(
            lambda: self._interceptors or InterceptorRegistry.default()
        )
        self.sessions = store
        builder = self._builder(resources, store, directory, tools, interceptors)
        chosen = [
            *configured_factories(builder, config, self._specs),
            *(make(builder, config) for make in self._extra_factories),
        ]
        started: list[AgentBuilderFactory] = []
        try:
            await start_all(chosen, registry, started)
            for factory in started:
                self.factories[factory.name] = factory
            self.a2a_registrar = await start_registrar(config, registry)
            registry.readiness.mark_ready()
            logger.info("serving {} agents", len(registry))
            yield
        finally:
            if self.a2a_registrar is not None:
                await self.a2a_registrar.stop()
            for factory in reversed(started):
                await factory.stop()
            self.sessions = None
            await store.aclose()
            await self.mcp.aclose()
            await directory.aclose()
            await resources.aclose()
            logger.info("stopped")

    def _builder(
        self,
        resources: Resources,
        store: SessionStore,
        directory: NacosA2aDirectory,
        tools: ToolRegistry,
        interceptors: InterceptorRegistry,
    ) -> AgentBuilder:
        auth = self.config.auth
        return AgentBuilder(
            tools=tools,
            interceptors=interceptors,
            resources=resources,
            sessions=store,
            environ=self.environ,
            environment=service_policy(
                self.config.environment.allow,
                (auth.keys_env, auth.admin_keys_env, auth.metrics_keys_env),
            ),
            secrets=self.secrets,
            mcp=self.mcp,
            agents=self.registry,
            a2a=directory.url_of,
            prices=self.config.models.price_list(),
        )

    async def begin_stopping(self) -> None:
        """Not ready any more: the A2A registry stops handing out this service, watch
        streams end, ``/readyz`` answers 503 and every response closes its connection.
        Requests are still served (``listen.lame_duck_seconds``). Once only."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        if self.a2a_registrar is not None:
            await self.a2a_registrar.withdraw()
        if self.config.listen.lame_duck_seconds:
            logger.info(
                "stopping: /readyz answers 503; requests are served for {:g} s more",
                self.config.listen.lame_duck_seconds,
            )

    def begin_drain(self) -> None:
        """The port is closed: running requests get ``listen.drain_seconds`` to finish."""
        seconds = self.config.listen.drain_seconds
        logger.info(
            "stopping: no new connections; {} running request(s) have up to {:g} s to finish",
            self.drain.running,
            seconds,
        )
        self.drain.begin(seconds)


def _run_records(config: ServiceConfig) -> tuple[TraceStore, ResponseStore]:
    """The trace and Response stores, kept in the fleet's Redis when its sessions are."""
    shared = SharedRuns.from_config(config, responses=(MAX_RESPONSES, MAX_BYTES))
    limits = config.traces
    traces = TraceStore(limits.max_traces, max_bytes=limits.max_bytes, shared=shared)
    history = config.sessions.max_history_bytes
    return traces, ResponseStore(history_bytes=history, shared=shared)
