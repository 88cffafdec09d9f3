"""The tree runtime (SPEC §17.1–§17.2): store, registry, continuation manager, tools and provider of
one agent tree, built once per run, plus the quiescence check (span S11).

`Tree` is what `run_tree` drives and what tests drive directly, so both exercise the same objects.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dsh.loader.agent import Agent, AgentOptions, AgentRegistry, Idle
from dsh.loader.errors import ConfigError, SessionError
from dsh.loader.hang_note import note_hangs
from dsh.loader.ids import new_root_id
from dsh.loader.models import ModelProvider, ReplayProvider
from dsh.loader.models.budget import BudgetedProvider, RunBudget
from dsh.loader.session import Session, SessionStore, make_header
from dsh.loader.subagents import (
    Catalogue,
    ContinuationManager,
    ManagerConfig,
    continuation_message,
    drain,
    drain_descendants,
    plan_recovery,
    recover,
    scan_tree,
    state_of,
    turn_cut_off,
)
from dsh.loader.texts import render
from dsh.loader.tools import Delegation, tools_for

__all__ = ["Quiescence", "Tree", "quiescence", "refuse_child_resume"]

logger = logging.getLogger(__name__)

Quiescence = Literal["RUNNING", "DONE", "STALLED"]


@dataclass
class Tree:
    """One agent tree's runtime objects, built once per run."""

    home: Path
    provider: ModelProvider
    options: AgentOptions = field(default_factory=AgentOptions)
    manager_config: ManagerConfig = field(default_factory=ManagerConfig)
    batch_delay_ms: int = 0
    fsync: bool = False
    agent_class: type[Agent] = Agent
    inline_io: bool = False  # replay runs: store I/O on the loop thread (SPEC §26 item 1)
    # Run-wide budgets (issue 15 finding 9): shared by every agent's provider and `subagent` tool.
    budget: RunBudget | None = None
    # Another engine's backend for `subagent` (loader/engines/); None: this tree's manager.
    delegation: Delegation | None = None

    def __post_init__(self) -> None:
        self.store = SessionStore(
            self.home, batch_delay_ms=self.batch_delay_ms, fsync=self.fsync, inline_io=self.inline_io
        )
        self.registry = AgentRegistry()
        self.catalogue = Catalogue(self.store.sessions_dir, live=self.store.get_live)
        if self.manager_config.model is None:
            self.manager_config = ManagerConfig(
                max_depth=self.manager_config.max_depth,
                report_delivery=self.manager_config.report_delivery,
                model=self.options.model,
            )
        # Replay binding (§15.3) or the recorder's child ledger (§15.5); live providers have none.
        hook = getattr(self.provider, "bind_child", None) or getattr(self.provider, "note_child", None)
        self.manager = ContinuationManager(
            registry=self.registry, store=self.store, factory=self.make_agent,
            config=self.manager_config, descriptor_hook=hook,
        )
        self.agent_hooks: list[Callable[[Agent], None]] = []
        if isinstance(self.provider, ReplayProvider):
            note_hangs(self.provider, self.registry.get)  # so a resume serves an aborted hang once
        self.roots: list[Agent] = []
        self.resumed_at: dict[str, int] = {}

    def make_agent(self, session: Session, mode: Literal["root", "continuable", "one-shot"]) -> Agent:
        self.catalogue.note_created(session.id)
        provider = self.provider if self.budget is None else BudgetedProvider(self.provider, self.budget)
        agent = self.agent_class(
            session,
            store=self.store,
            provider=provider,
            tools=tools_for(mode, self.manager, self.catalogue, self.budget, self.delegation),
            options=self.options,
            registry=self.registry,
        )
        for hook in self.agent_hooks:
            hook(agent)
        return agent

    async def create_root(
        self, root_id: str | None = None, *, resume: str | None = None, continue_cut_off: bool = True
    ) -> Agent:
        """A new root, or with `resume` an existing root whose tree is finished (issue 9 item 3).

        Resume: refuse a child session (it names its root, exit 2); load the root with repair (§5.6);
        bind every session of the tree to its transcript script at the cursor its log shows; make
        every descendant that owes work resident under its parent (recovery.py); then wake the root
        for restored pending work or, with `continue_cut_off`, continue a turn the crash cut off.
        `resumed_at[root.id]` is the length of the root's log before anything of this run.
        """
        if resume is not None:
            return await self._resume_root(resume, continue_cut_off=continue_cut_off)
        root_id = root_id or new_root_id()
        bind_root = getattr(self.provider, "bind_root", None) or getattr(self.provider, "note_root", None)
        if bind_root is not None:
            bind_root(root_id)
        session = await self.store.create(make_header(root_id, cwd=os.getcwd()))
        root = self.make_agent(session, "root")
        self.registry.register(root)
        self.roots.append(root)
        return root

    async def _resume_root(self, root_id: str, *, continue_cut_off: bool) -> Agent:
        # Read-only first: a refused resume locks, truncates and repairs nothing.
        await asyncio.to_thread(refuse_child_resume, self.store, root_id)
        session = await self.store.load(root_id)
        try:
            tree = await asyncio.to_thread(scan_tree, self.store, self.catalogue, root_id)
        except BaseException:
            await self.store.close(session)
            raise
        resume_session = getattr(self.provider, "resume_session", None)
        if resume_session is not None:
            resume_session(root_id, None, session.events)
            for f in sorted(tree, key=lambda f: (f.header.get("createdAt", 0), f.id)):
                if f.descriptor is not None:
                    resume_session(f.id, f.descriptor, f.events)
        else:
            note_root = getattr(self.provider, "bind_root", None) or getattr(self.provider, "note_root", None)
            if note_root is not None:
                note_root(root_id)
        root = self.make_agent(session, "root")
        self.registry.register(root)
        self.roots.append(root)
        self.resumed_at[root.id] = len(session.events)
        await recover(self.manager, root, plan_recovery(root.id, root.session.events, tree))
        if not root.resume_pending() and continue_cut_off and turn_cut_off(root.session.events):
            root.followup(continuation_message())
        return root

    def quiescence(self, root: Agent) -> Quiescence:
        return quiescence(self.manager, root)

    async def wait_quiet(self, root: Agent, *, release_parked: bool = True,
                         on_stall: Callable[[list[str]], None] | None = None,
                         released: set[str] | None = None) -> None:
        """Wait until S11 gives DONE; on STALLED, release parked work or keep waiting (`run.parked`)."""
        stalled_reported = False
        while True:
            changed = asyncio.Event()  # a new fact gets a new event
            offs = [
                self.registry.events.on("agent/status", lambda _p: changed.set()),
                self.registry.events.on("agent/maintenance-end", lambda _p: changed.set()),
                self.manager.events.on("changed", lambda _p: changed.set()),
            ]
            try:
                state = self.quiescence(root)
                if state == "DONE":
                    return
                if state == "STALLED":
                    if release_parked:
                        if released is not None:
                            released.update(a.child_id for a in self.manager.activations.values() if a.parked)
                        await drain_descendants(self.manager, [root])
                        continue
                    if not stalled_reported and on_stall is not None:
                        on_stall(sorted(a.child_id for a in self.manager.activations.values() if a.parked))
                    stalled_reported = True
                else:
                    stalled_reported = False
                await changed.wait()
            finally:
                for off in offs:
                    off()

    async def shutdown(self, *roots: Agent) -> None:
        """Release each root's descendants, dispose the roots, drain the rest, close the provider."""
        roots = roots or tuple(self.roots)
        try:
            await drain_descendants(self.manager, list(roots))
        except Exception:
            logger.warning("releasing subagents at shutdown failed", exc_info=True)
        for root in roots:
            await root.dispose()
        try:
            await drain(self.manager)
        except Exception:
            logger.warning("draining the manager failed", exc_info=True)
        # Durable notice writes into parents that are not live (notice.py) finish before we exit.
        while self.manager.offline_deliveries:
            await asyncio.gather(*list(self.manager.offline_deliveries), return_exceptions=True)
        await self.provider.aclose()

    async def close_sessions(self) -> None:
        """Best-effort flush and unlock of every live session (after an over-long shutdown)."""
        for agent in list(self.registry):
            try:
                await self.store.close(agent.session)
            except Exception:
                logger.warning("closing %s failed", agent.id, exc_info=True)


def refuse_child_resume(store: SessionStore, session_id: str) -> None:
    """`--resume` takes a root (issue 9 item 5): a child's turns belong to its parent's tree, so a
    child is refused with RESUME_NOT_ROOT (usage, exit 2) naming the root to resume. Blocking, and
    read-only; a missing session is UNKNOWN_SESSION (T-CLI-UNKNOWN-SESSION, exit 2, issue 15
    finding 7); any other session that does not read is left to the load to report."""
    try:
        header = store.read(session_id).header
    except SessionError as exc:
        if exc.code == "SESSION_NOT_FOUND":
            raise ConfigError(render("T-CLI-UNKNOWN-SESSION", id=session_id, home=store.home),
                              code="UNKNOWN_SESSION") from exc
        return
    if not header.get("parentSession"):
        return
    seen = {session_id}
    current = session_id
    while True:  # walk parentSession up to the root; stop at a cycle or a gap
        parent = header.get("parentSession")
        if not isinstance(parent, str) or parent in seen:
            break
        seen.add(parent)
        current = parent
        try:
            header = store.read(current).header
        except SessionError:
            break
    raise ConfigError(render("T-ERR-RESUME-CHILD", id=session_id, root=current), code="RESUME_NOT_ROOT")


def quiescence(manager: ContinuationManager, root: Agent) -> Quiescence:
    # Sync span S11: root phase, materializations and all Activations are read together, so a
    # settlement cannot slip between the reads.
    if not isinstance(root.phase, Idle) or manager.materializations:
        return "RUNNING"
    for a in manager.activations.values():
        if a.disposal is not None or not isinstance(a.agent.phase, Idle) or state_of(a) == "settled":
            return "RUNNING"
    if not manager.activations:
        return "DONE"
    return "STALLED"
