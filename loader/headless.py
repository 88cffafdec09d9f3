"""The headless runner (SPEC §17): one agent tree per process; the entry point the CLI and tests share.

`Tree` assembles the runtime (store, registry, continuation manager, tools, provider) so tests can
drive the same objects `run_tree` uses. `run_tree` sends the task, waits for quiescence (span S11:
root idle and no continuable descendant resident), shuts down and builds the run result (§7.4).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from loader.errors import ConfigError
from loader.fences import Fences
from loader.texts import render
from loader.agent import Agent, AgentOptions, AgentRegistry, Idle, run_outcome, user_message
from loader.ids import new_root_id
from loader.models import ModelProvider, ReplayProvider
from loader.session import Session, SessionStore, make_header
from loader.subagents import (
    Catalogue,
    ContinuationManager,
    ManagerConfig,
    drain,
    drain_descendants,
    state_of,
)
from loader.tools import tools_for
from loader.transcripts import Transcript, load_transcript

__all__ = ["EXIT_CODES", "Quiescence", "RunResult", "Tree", "exit_code_for", "quiescence", "run_tree"]

logger = logging.getLogger(__name__)

EXIT_CODES: dict[str, int] = {"completed": 0, "error": 1, "max-tokens": 3, "aborted": 4, "refusal": 5}

Quiescence = Literal["RUNNING", "DONE", "STALLED"]


def exit_code_for(stop_reason: str, violations: list[dict[str, Any]]) -> int:
    """§17.3: violations (1) outrank the stop reason; unknown reasons count as errors."""
    if violations:
        return 1
    return EXIT_CODES.get(stop_reason, 1)


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

    def __post_init__(self) -> None:
        self.store = SessionStore(self.home, batch_delay_ms=self.batch_delay_ms, fsync=self.fsync)
        self.registry = AgentRegistry()
        self.catalogue = Catalogue(self.store.sessions_dir)
        if self.manager_config.model is None:
            self.manager_config = ManagerConfig(
                max_depth=self.manager_config.max_depth,
                report_delivery=self.manager_config.report_delivery,
                model=self.options.model,
            )
        hook = getattr(self.provider, "bind_child", None)  # replay binding (§15.3); others have none
        self.manager = ContinuationManager(
            registry=self.registry, store=self.store, factory=self.make_agent,
            config=self.manager_config, descriptor_hook=hook,
        )
        self.agent_hooks: list[Callable[[Agent], None]] = []
        self.roots: list[Agent] = []

    def make_agent(self, session: Session, mode: Literal["root", "continuable", "one-shot"]) -> Agent:
        agent = self.agent_class(
            session,
            store=self.store,
            provider=self.provider,
            tools=tools_for(mode, self.manager, self.catalogue),
            options=self.options,
            registry=self.registry,
        )
        for hook in self.agent_hooks:
            hook(agent)
        return agent

    async def create_root(self, root_id: str | None = None) -> Agent:
        root_id = root_id or new_root_id()
        bind_root = getattr(self.provider, "bind_root", None)
        if bind_root is not None:
            bind_root(root_id)
        session = await self.store.create(make_header(root_id, cwd=os.getcwd()))
        root = self.make_agent(session, "root")
        self.registry.register(root)
        self.roots.append(root)
        return root

    def quiescence(self, root: Agent) -> Quiescence:
        return quiescence(self.manager, root)

    async def wait_quiet(self, root: Agent, *, release_parked: bool = True,
                         on_stall: Callable[[list[str]], None] | None = None) -> None:
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
        await self.provider.aclose()


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


@dataclass
class RunResult:
    root_session_id: str
    stop_reason: str
    exit_code: int
    output: str
    usage: dict[str, int]
    violations: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None = None
    timed_out: bool = False
    interrupted: bool = False


async def run_tree(
    *,
    task: str | None = None,
    transcript: str | Path | Transcript | None = None,
    home: Path,
    provider: ModelProvider | None = None,
    options: AgentOptions | None = None,
    manager_config: ManagerConfig | None = None,
    batch_delay_ms: int = 0,
    fsync: bool = False,
    parked: Literal["wait", "release"] = "wait",
    fences_allowed: bool = False,
    fence_timeout: float = 10.0,
) -> RunResult:
    script: Transcript | None = None
    if transcript is not None:
        script = transcript if isinstance(transcript, Transcript) else load_transcript(transcript)
        if task is None:
            task = script.task
        parked = "release"  # a transcript drives the run: nobody is there to resume parked work
    if task is None:
        raise ValueError("a task or a transcript with a task is required")
    if provider is None:
        if script is None:
            raise ValueError("a transcript is required without a provider")
        provider = ReplayProvider(script)
    if script is not None and script.spec.fences and not fences_allowed:
        raise ConfigError(render("T-CLI-FENCES", file=script.path), code="FENCES_REFUSED")
    tree = Tree(
        home=home, provider=provider, options=options or AgentOptions(),
        manager_config=manager_config or ManagerConfig(), batch_delay_ms=batch_delay_ms, fsync=fsync,
    )
    fences: Fences | None = None
    if script is not None and script.spec.fences and isinstance(provider, ReplayProvider):
        fences = Fences(list(script.spec.fences), tree=tree, replay=provider, timeout=fence_timeout)
        fences.install()
    root = await tree.create_root()
    boundary = len(root.session.events)
    try:
        root.followup(user_message(task, {"kind": "user"}))
        await tree.wait_quiet(root, release_parked=parked == "release")
    finally:
        events = list(root.session.events[boundary:])
        if fences is not None:
            fences.release()
        await tree.shutdown(root)
    violations: list[dict[str, Any]] = []
    if isinstance(provider, ReplayProvider):
        provider.finish_checks()
        violations = list(provider.violations)
    if fences is not None:
        violations.extend(fences.finish())
    outcome = run_outcome(events)
    error = None
    if outcome.end is not None and outcome.end["data"]["reason"].get("kind") == "error":
        error = outcome.end["data"]["reason"].get("error")
    return RunResult(
        root_session_id=root.id,
        stop_reason=outcome.stop_reason,
        exit_code=exit_code_for(outcome.stop_reason, violations),
        output=outcome.output,
        usage=outcome.usage,
        violations=violations,
        error=error,
    )
