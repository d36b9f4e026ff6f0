"""The Spring AI Alibaba layout factory: agents kept in Nacos the way
``NacosReactAgentBuilder`` keeps them, served unchanged (``_saa_layout`` has the map).

Every group ``ai-agent-*`` of the namespace is one agent. One fuzzy watch on that
group pattern finds new agents and pieces; each group is a ``NacosSource`` on one
shared client (content pushes, md5 reconcile, snapshot), and the prompts of group
``nacos-ai-meta`` are one more. Pieces are assembled into one AgentSpec and swapped
as one revision: a change waits ``ASSEMBLY_WINDOW`` for the pieces published with
it, so a release that touches several dataIds is never served half-applied. Unlike
Spring AI Alibaba, which patches the live agent in place, an assembly that does not
validate or build is refused and the last good revision keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Mapping
from dataclasses import replace
from functools import cache

from loguru import logger

from dynagent.config import NacosConfig
from dynagent.deadlines import cancelled
from dynagent.exceptions import ConfigError, Conflict
from dynagent.factories.base import _unexpected
from dynagent.nacos import _saa_layout as layout
from dynagent.nacos._fuzzy import FuzzyWatch, GroupChange
from dynagent.nacos.client import NacosClient, NacosError
from dynagent.nacos.snapshot import Snapshot
from dynagent.nacos.source import NacosSource
from dynagent.registry.facade import AgentRegistry
from dynagent.runtime.agent import Agent, SourceInfo, Variant
from dynagent.runtime.builder import AgentBuilder
from dynagent.sources.base import Document
from dynagent.spec.agent import AgentSpec, load_spec
from dynagent.spec.tools import OutboundFields

ASSEMBLY_WINDOW = 0.3
"""Seconds a change waits for the other pieces published with it."""

SETTLE_ROUNDS = 5
"""Windows an assembly waits at most for pieces the server lists but has not pushed yet."""


@cache
def _tool_types() -> frozenset[str]:
    """The ``type:`` values AgentSpec's tools accept in this build."""
    text = json.dumps(AgentSpec.model_json_schema())
    return frozenset(kind for kind in ("mcp", "agent") if f'"const": "{kind}"' in text)


class SpringAiAlibabaAgentBuilderFactory:
    name = "spring-ai-alibaba"

    def __init__(
        self,
        builder: AgentBuilder,
        settings: NacosConfig,
        network: OutboundFields | None = None,
    ) -> None:
        self._template = builder
        self.settings = settings
        self.network = (network or OutboundFields()).model_dump(exclude_defaults=True)
        """``allow_hosts``/``allow_private`` for every server and partner the layout names."""
        self.client = NacosClient(settings)
        self._registry: AgentRegistry | None = None
        self._groups: dict[str, NacosSource] = {}
        self._loads: dict[str, asyncio.Future[None]] = {}
        """Group → its source's first load, awaited by whoever asks for the group."""
        self._pieces: dict[str, dict[str, layout.Piece]] = {}
        """Agent name → its group's pieces by dataId."""
        self._prompts: dict[str, layout.Piece] = {}
        """Prompt dataId → piece."""
        self._prompt_source: NacosSource | None = None
        self._watch: FuzzyWatch | None = None
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._rounds: dict[str, int] = {}
        """Agent name → windows its assembly already waited for pieces in flight."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._poll: asyncio.Task[None] | None = None
        self._starting = True

    def builder(self) -> AgentBuilder:
        return replace(self._template, factory=self.name)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, registry: AgentRegistry) -> None:
        self._registry = registry
        self._prompt_source = self._source(layout.PROMPT_GROUP, watch=True)
        await self._prompt_source.start(self._prompt_changed)
        try:
            await self.client.connect()
            self._watch = await self.client.watch_group(
                f"{layout.GROUP_PREFIX}*", self._group_changed
            )
            groups = set(await self.client.list_groups(layout.GROUP_PREFIX))
        except NacosError:
            groups = await asyncio.to_thread(self._snapshot_groups)
        for group in sorted(groups):
            await self._add_group(group)
        self._starting = False
        for name in sorted(self._pieces):
            await self._assemble(name, first=True)
        self._poll = asyncio.create_task(self._discover(), name="saa-discover")

    async def stop(self) -> None:
        for handle in self._pending.values():
            handle.cancel()
        loading = [load for load in self._loads.values() if not load.done()]
        tasks = [*self._tasks, *loading, *([self._poll] if self._poll else [])]
        await cancelled(*tasks)
        if self._watch is not None:
            await self._watch.stop()
        for source in self._groups.values():
            await source.stop()
        if self._prompt_source is not None:
            await self._prompt_source.stop()
        await self.client.close()

    async def write(
        self, name: str, variant: Variant, spec: AgentSpec | None, current: SourceInfo | None
    ) -> None:
        raise Conflict(
            f"agent {name!r} comes from the Spring AI Alibaba layout in Nacos; edit its "
            f"pieces in group {layout.GROUP_PREFIX}{name} instead"
        )

    async def read(self, name: str, variant: Variant, current: SourceInfo | None) -> str | None:
        return None  # no canary documents in this layout: nothing for rollouts to edit

    async def replace(
        self, name: str, variant: Variant, current: SourceInfo | None, text: str, expected: str
    ) -> bool:
        await self.write(name, variant, None, current)  # refuses, saying where to edit
        return False

    # -- sources -----------------------------------------------------------------

    def _source(self, group: str, *, watch: bool) -> NacosSource:
        settings = self.settings
        namespace = settings.namespace or "public"
        registry = self._registry
        assert registry is not None
        source_name = f"nacos:{namespace}/{group}"
        return NacosSource(
            self.client,
            group,
            accepts=(lambda d: d.startswith("prompt-") and d.endswith(".json"))
            if group == layout.PROMPT_GROUP
            else (lambda d: d in layout.PIECES),
            snapshot=Snapshot(settings.snapshot_dir / namespace / group),
            poll_seconds=settings.poll_seconds,
            on_health=lambda reason: registry.readiness.set_degraded(source_name, reason),
            on_stale=lambda: registry.readiness.refused_stale(source_name),
            watch=watch,
            owns_client=False,
            verdicts=False,  # an assembly decides: pieces are kept once it is served
        )

    def _snapshot_groups(self) -> set[str]:
        folder = self.settings.snapshot_dir / (self.settings.namespace or "public")
        if not folder.is_dir():
            return set()
        return {p.name for p in folder.iterdir() if p.name.startswith(layout.GROUP_PREFIX)}

    async def _add_group(self, group: str) -> None:
        """Load ``group`` once; a caller that asks while it loads (start's listing, the
        watch announcing the group's pieces) waits for that load rather than skipping it,
        so that start returns with every listed agent's pieces in."""
        if not group.startswith(layout.GROUP_PREFIX):
            return
        load = self._loads.get(group)
        if load is None:
            source = self._source(group, watch=False)
            self._groups[group] = source
            load = self._loads[group] = asyncio.ensure_future(source.start(self._piece_changed))
        if not load.done():
            await load

    def _group_changed(self, change: GroupChange) -> None:
        source = self._groups.get(change.group)
        if source is not None:
            source.group_changed(change)
        elif change.kind != "deleted" and change.data_id in layout.PIECES:
            self._spawn(self._add_group(change.group))

    async def _discover(self) -> None:
        """Safety net for the fuzzy watch: list the ``ai-agent-*`` groups now and then."""
        while True:
            await asyncio.sleep(self.settings.poll_seconds)
            try:
                await self.client.connect()
                for group in sorted(await self.client.list_groups(layout.GROUP_PREFIX)):
                    await self._add_group(group)
            except NacosError as exc:
                logger.warning("listing Spring AI Alibaba agent groups failed: {}", exc)

    def _spawn(self, work: object) -> None:
        assert asyncio.iscoroutine(work)
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- pieces ------------------------------------------------------------------

    async def _piece_changed(self, document: Document) -> bool:
        """Held until the agent is assembled; ``_keep`` snapshots what that accepts."""
        group = document.info.details.get("group", "")
        name = group.removeprefix(layout.GROUP_PREFIX)
        pieces = self._pieces.setdefault(name, {})
        if document.text is None:
            pieces.pop(document.key, None)
        else:
            pieces[document.key] = layout.document_piece(document)
        self._schedule(name)
        return False

    async def _prompt_changed(self, document: Document) -> bool:
        if document.text is None:
            self._prompts.pop(document.key, None)
        else:
            self._prompts[document.key] = layout.document_piece(document)
        for name, pieces in self._pieces.items():
            base = pieces.get(layout.AGENT_BASE)
            with contextlib.suppress(ConfigError):
                if base and layout.prompt_data_id(layout.prompt_key_of(base)) == document.key:
                    self._schedule(name)
        return False

    async def _keep(self, pieces: Mapping[str, layout.Piece], prompt: layout.Piece | None) -> None:
        """Snapshot the pieces of an agent just served: only what was accepted is kept."""
        for piece in [*pieces.values(), *([prompt] if prompt is not None else [])]:
            source = self._groups.get(piece.group)
            if piece.group == layout.PROMPT_GROUP:
                source = self._prompt_source
            if source is not None:
                await source.keep(piece.data_id, piece.text)

    def _schedule(self, name: str, *, settling: bool = False) -> None:
        """Assemble ``name`` once no piece of it changed for ``ASSEMBLY_WINDOW``."""
        if self._starting:
            return  # start() assembles every agent once all pieces are in
        if not settling:
            self._rounds.pop(name, None)
        pending = self._pending.pop(name, None)
        if pending is not None:
            pending.cancel()
        loop = asyncio.get_running_loop()
        self._pending[name] = loop.call_later(
            ASSEMBLY_WINDOW, lambda: self._spawn(self._assemble(name))
        )

    async def _in_flight(self, group: str, pieces: Mapping[str, layout.Piece]) -> set[str]:
        """The groups where the server lists a piece other than the one held: published,
        but its push has not arrived (pushes trail a publish by 0.1 s, and by seconds on
        a loaded server)."""
        held = [p for p in pieces.values() if not p.gray]
        stale: set[str] = set()
        try:
            listed = await self.client.list_group(group)
            if any(d in layout.PIECES and d not in pieces for d in listed):
                stale.add(group)
            for piece in held:
                found = listed if piece.group == group else {}
                if piece.group != group:  # the prompt
                    found = await self.client.list_group(piece.group, piece.data_id)
                if found.get(piece.data_id, piece.md5) != piece.md5:
                    stale.add(piece.group)
        except NacosError:
            return set()  # assemble what is here; the reconcile catches up
        return stale

    async def _pull(self, groups: set[str]) -> None:
        """Read what the server lists for ``groups`` now rather than wait for its push:
        each piece read arrives through the source as a push would (and a read that
        trails the write is dropped there, to be read again next window)."""
        for group in sorted(groups):
            source = self._prompt_source if group == layout.PROMPT_GROUP else None
            source = source or self._groups.get(group)
            if source is None:
                continue
            try:
                await source.reconcile()
            except NacosError as exc:
                logger.debug("reading {} ahead of its push failed: {}", group, exc)

    async def _assemble(self, name: str, *, first: bool = False) -> None:
        """Build ``name`` from the pieces held. ``first``: start's pass, which serves an
        agent not served yet from what the load read (one listing's versions) rather than
        wait for a piece in flight: a change pushed meanwhile is assembled after it."""
        self._pending.pop(name, None)
        registry = self._registry
        assert registry is not None
        pieces = dict(self._pieces.get(name, {}))
        group = f"{layout.GROUP_PREFIX}{name}"
        prompt_piece = self._prompt_of(pieces)
        held = {**pieces, **({"": prompt_piece} if prompt_piece else {})}
        rounds = self._rounds.get(name, 0)
        settle = not (first and name not in registry) and rounds < SETTLE_ROUNDS
        stale = await self._in_flight(group, held) if settle else set()
        if stale:
            await self._pull(stale)
            self._rounds[name] = rounds + 1  # after the pull, whose deliveries restart the window
            self._schedule(name, settling=True)
            return
        self._rounds.pop(name, None)
        where = f"{self.settings.namespace or 'public'}/{group}"
        if layout.AGENT_BASE not in pieces:
            if name in registry:
                registry.table.remove(name, f"deleted in Nacos ({group}/{layout.AGENT_BASE})")
            return
        try:
            agent, prompt = self._built(name, where, pieces, self._prompts)
        except Exception as exc:  # as in DocumentApplier: a bug must not end the watch
            error = _unexpected(exc, where, name)
            if isinstance(exc, ConfigError):
                error = ConfigError(exc.reason, source=where, agent=name, issues=exc.issues)
            await self._fall_back(name, group, where)
            registry.table.fail(name, error)
            return
        registry.table.put(agent)
        await self._keep(pieces, prompt)

    def _built(
        self,
        name: str,
        where: str,
        pieces: Mapping[str, layout.Piece],
        prompts: Mapping[str, layout.Piece],
    ) -> tuple[Agent, layout.Piece | None]:
        """``name`` built from ``pieces`` and the prompt of ``prompts`` they name."""
        key = layout.prompt_key_of(pieces[layout.AGENT_BASE])
        prompt = prompts.get(layout.prompt_data_id(key)) if key else None
        document = layout.spec_document(name, pieces, prompt, self.network)
        self._check_tool_types(document)
        spec = load_spec(document, source=where)
        group = f"{layout.GROUP_PREFIX}{name}"
        info = layout.source_info(where, group, pieces, prompt)
        source = self._groups.get(group)
        info = replace(info, health=source.health) if source is not None else info
        return self.builder().build(spec, source=info), prompt

    async def _fall_back(self, name: str, group: str, where: str) -> None:
        """Nothing serves ``name`` and its release in Nacos is refused (a restart finding a
        broken piece there): serve the revision whose pieces the snapshot kept."""
        assert self._registry is not None
        entry = self._registry.table.find(name)
        source, prompts = self._groups.get(group), self._prompt_source
        if (entry is not None and entry.stable is not None) or source is None or prompts is None:
            return
        saved, _ = await asyncio.to_thread(source.snapshot.load)
        kept, _ = await asyncio.to_thread(prompts.snapshot.load)
        pieces = {d: layout.kept_piece(group, d, t) for d, t in saved.items() if d in layout.PIECES}
        prompt_pieces = {d: layout.kept_piece(layout.PROMPT_GROUP, d, t) for d, t in kept.items()}
        if layout.AGENT_BASE in pieces:
            with contextlib.suppress(Exception):  # nothing kept builds: the refusal shows alone
                self._registry.table.put(self._built(name, where, pieces, prompt_pieces)[0])

    def _prompt_of(self, pieces: Mapping[str, layout.Piece]) -> layout.Piece | None:
        base = pieces.get(layout.AGENT_BASE)
        if base is None:
            return None
        try:
            key = layout.prompt_key_of(base)
        except ConfigError:
            return None
        return self._prompts.get(layout.prompt_data_id(key)) if key else None

    def _check_tool_types(self, document: Mapping[str, object]) -> None:
        tools = document.get("tools")
        wanted = (
            {t["type"] for t in tools if isinstance(t, dict)} if isinstance(tools, list) else set()
        )
        missing = sorted(str(kind) for kind in wanted - _tool_types())
        if missing:
            raise ConfigError(
                f"{layout.MCP_SERVERS} or {layout.PARTNER_AGENTS} lists entries that need "
                f"'type: {missing[0]}' tools, which this build of Dynagent does not have yet; "
                "the agent is not served without them"
            )
