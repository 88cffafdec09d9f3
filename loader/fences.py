"""Test-only fences (SPEC §16): delay a seam, run maintenance on an idle agent, or fail a checkpoint.

Fences never create, send, remove or cancel messages or agents; they only remove scheduling variance.
Conditions are monotone facts recorded synchronously by the listeners that observe them; waiters
resume later. Agent names are transcript keys, mapped to live sessions through the replay binding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from dsh.loader.agent import Agent, Idle, PreStep
from dsh.loader.errors import CheckpointError, DshError

if TYPE_CHECKING:
    from dsh.loader.transcripts.fence_schema import Condition, Fence
    from dsh.loader.transcripts.schema import UserAction
    from dsh.loader.tree import Tree
    from dsh.loader.models import ReplayProvider

__all__ = ["Fact", "FenceTimeout", "Fences", "named_agents", "unused_fences"]

logger = logging.getLogger(__name__)

# (kind, agent key, detail...): ("inserted", key, source kind, message id), ("turnEnded", key, turn),
# ("step", key, turn, step), ("settled", key, epoch), ("parked", key), ("hangReached", key).
Fact = tuple[Any, ...]

FENCE_ORDER = 50  # pre-step waterfall: after the checkpoint (0), before test hooks (100)


class FenceTimeout(DshError):
    def __init__(self, message: str) -> None:
        super().__init__("FENCE_TIMEOUT", message)


class Fences:
    def __init__(self, specs: list[Fence], *, tree: Tree | None, replay: ReplayProvider, timeout: float) -> None:
        """`tree` None: facts come only by `merge` (the Temporal client's user, engines/remote_user.py)."""
        self.specs = specs
        self.tree = tree
        self.replay = replay
        self.timeout = timeout
        self.engaged = [False] * len(specs)
        self.violations: list[dict[str, Any]] = []
        # Every fact, keyed by transcript agent key (what conditions name), each one unique, so a
        # fact learnt twice (an engine that mirrors facts between processes: `merge`) counts once.
        self._facts: set[Fact] = set()
        # Invariant: _counts[f[:2]] and _counts[f[:3]] count the facts f of `_facts` with that
        # prefix (issue 13: `_count` rescanned every fact at each change, O(N²) in a fan-out).
        self._counts: dict[tuple[Any, ...], int] = {}
        # Called with each fact first recorded here (not merged ones): the Temporal engine
        # publishes them to the tree's other turns (loader/engines/README.md).
        self.on_fact: Callable[[Fact], None] | None = None
        self._waiters: list[tuple[Condition, asyncio.Future[str]]] = []
        self._released = False
        self._offs: list[Any] = []

    # -- wiring ---------------------------------------------------------------------------
    def install(self) -> None:
        assert self.tree is not None, "fences without a tree only merge facts"
        self.tree.agent_hooks.append(self._on_agent)
        events = self.tree.registry.events
        self._offs += [
            events.on("agent/inbox/inserted", self._on_inserted),
            events.on("agent/converged", self._on_converged),
            self.tree.manager.events.on("subagent/end", self._on_settled),
            self.replay.add_hang_listener(self._on_hang),
        ]

    def _on_agent(self, agent: Agent) -> None:
        agent.pre_step.add(self._pre_step, order=FENCE_ORDER)
        agent.session.subscribe(lambda event: self._on_event(agent, event))
        agent.events.on("agent/status", lambda payload: self._on_status(agent, payload))

    def _key(self, agent: Agent) -> str | None:
        return self.replay.agent_key_of(agent.id)

    def may_wait(self, key: str | None) -> bool:
        """Whether a fence can make agent `key` wait on a condition (a hold or a maintenance it
        names; `*children` names every child). Only such an agent needs other processes' facts: on
        Temporal a turn of any other agent publishes its facts and mirrors none (issue 12: each
        mirror's answers go into the root's history). An unbound agent (None) is assumed to."""
        if key is None:
            return True
        for fence in self.specs:
            spec = fence.hold or fence.maintenance
            if spec is not None and (spec.agent == key or (spec.agent == "*children" and key != "root")):
                return True
        return False

    def named(self) -> set[str]:
        """`named_agents` of these fences, and the agents the transcript's user actions wait on."""
        return named_agents(self.specs) | user_agents(self.replay.transcript.spec.user)

    # -- facts (monotone) -----------------------------------------------------------------
    def _record(self, session_id: str, kind: str, *detail: str | int | None) -> None:
        key = self.replay.agent_key_of(session_id)
        if key is None:
            return  # an unbound session: no condition can name it
        fact: Fact = (kind, key, *detail)
        if fact in self._facts:
            return
        self._add(fact)
        if self.on_fact is not None:
            self.on_fact(fact)
        self._changed()

    def merge(self, facts: Iterable[Fact]) -> None:
        """Facts recorded elsewhere in the tree (another process's turns)."""
        new = [f for f in facts if f not in self._facts]
        for fact in new:
            self._add(fact)
        if new:
            self._changed()

    def _add(self, fact: Fact) -> None:
        if fact in self._facts:  # a merged batch may repeat a fact
            return
        self._facts.add(fact)
        counts = self._counts
        for prefix in {fact[:2], fact[:3]}:
            counts[prefix] = counts.get(prefix, 0) + 1

    def _on_inserted(self, payload: dict[str, Any]) -> None:
        message = payload["message"]
        kind = message.get("source", {}).get("kind")
        self._record(payload["agent"].id, "inserted", str(kind) if kind is not None else None, str(message["id"]))

    def _on_event(self, agent: Agent, event: dict[str, Any]) -> None:
        if event["type"] == "turn/end":
            self._record(agent.id, "turnEnded", int(event["data"]["turn"]))

    def _on_converged(self, payload: dict[str, Any]) -> None:
        agent: Agent = payload["agent"]
        assert self.tree is not None  # installed: a tree's event
        a = self.tree.manager.activations.get(agent.id)
        if a is not None and isinstance(agent.phase, Idle) and a.accepted:
            self._record(agent.id, "parked")

    def note_parked(self, session_id: str) -> None:
        """An engine that knows parking without this tree's manager (the Temporal turn, whose
        manager holds no Activation) records the fact itself."""
        self._record(session_id, "parked")

    def _on_settled(self, edge: dict[str, Any]) -> None:
        self._record(edge["sessionId"], "settled", int(edge.get("epoch") or 0))

    def _on_hang(self, key: str) -> None:
        session_id = self.replay.session_of(key)
        if session_id is not None:
            self._record(session_id, "hangReached")

    def _count(self, kind: str, key: str, *detail: str | int | None) -> int:
        n = len(detail)
        if n <= 1:
            return self._counts.get((kind, key, *detail), 0)
        return sum(1 for f in self._facts if f[0] == kind and f[1] == key and f[2:2 + n] == detail)

    def holds(self, cond: Condition) -> bool:
        if cond.all is not None:
            return all(self.holds(c) for c in cond.all)
        if cond.any is not None:
            return any(self.holds(c) for c in cond.any)
        if (c := cond.inbox_accepted) is not None:
            if c.kind is None:
                return self._count("inserted", c.agent) >= c.count
            return self._count("inserted", c.agent, c.kind) >= c.count
        if (t := cond.turn_ended) is not None:
            return ("turnEnded", t.agent, t.turn) in self._facts
        if (h := cond.hang_reached) is not None:
            return ("hangReached", h.agent) in self._facts
        if (p := cond.parked) is not None:
            return ("parked", p.agent) in self._facts
        if (r := cond.step_reached) is not None:
            return ("step", r.agent, r.turn, r.step) in self._facts
        if (st := cond.settled) is not None:
            return self._count("settled", st.agent) >= st.count
        return False

    def _changed(self) -> None:
        for cond, fut in list(self._waiters):
            if not fut.done() and self.holds(cond):
                fut.set_result("met")

    async def _wait(self, cond: Condition, signal: Any) -> str:
        """'met', 'aborted', 'released' or 'timeout'."""
        if self.holds(cond):
            return "met"
        if self._released:
            return "released"
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        entry = (cond, fut)
        self._waiters.append(entry)
        waits: set[asyncio.Future[Any]] = {fut}
        if signal is not None:
            waits.add(signal.wait())
        try:
            done, _ = await asyncio.wait(waits, timeout=self.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._waiters.remove(entry)
        if fut in done:
            return fut.result()
        if signal is not None and signal.aborted:
            return "aborted"
        return "timeout"

    async def wait_until(self, cond: Condition, signal: Any) -> str:
        """`_wait` for another scripted party (`scripted_user.py`): 'met', 'aborted', 'released' or
        'timeout', under the same backstop as a hold."""
        return await self._wait(cond, signal)

    def _timeout(self, index: int, key: str) -> FenceTimeout:
        message = f"fence {index + 1} ({self.specs[index].kind} on {key}) waited {self.timeout}s"
        self.violations.append({"code": "FENCE_TIMEOUT", "agent": key, "message": message})
        return FenceTimeout(message)

    # -- hold and failCheckpoint (pre-step) ------------------------------------------------
    async def _pre_step(self, ctx: PreStep) -> None:
        key = self._key(ctx.agent)
        if key is None:
            return
        self._record(ctx.agent.id, "step", ctx.turn, ctx.step)
        for i, fence in enumerate(self.specs):
            spec = fence.fail_checkpoint
            if spec is not None and spec.agent == key and _matches(spec.turn, spec.step, ctx):
                self.engaged[i] = True
                raise CheckpointError(spec.message)
        for i, fence in enumerate(self.specs):
            hold = fence.hold
            if hold is None or not _matches(hold.turn, hold.step, ctx):
                continue
            if hold.agent != key and not (hold.agent == "*children" and key != "root"):
                continue
            self.engaged[i] = True
            if await self._wait(hold.until, ctx.signal) == "timeout":
                raise self._timeout(i, key)

    # -- maintenance ----------------------------------------------------------------------
    def _on_status(self, agent: Agent, payload: dict[str, Any]) -> None:
        if payload.get("status") != "idle":
            return
        key = self._key(agent)
        for i, fence in enumerate(self.specs):
            spec = fence.maintenance
            if spec is None or self.engaged[i] or spec.agent != key:
                continue
            if key is None or ("turnEnded", key, spec.after_turn) not in self._facts:
                continue
            self.engaged[i] = True
            until = spec.until

            async def task(signal: Any, i: int = i, until: Condition = until) -> None:
                if await self._wait(until, signal) == "timeout":
                    raise self._timeout(i, key or "?")

            # Same span as the idle edge, so a latched wake replays into this maintenance.
            fut = agent.run_maintenance(task)
            fut.add_done_callback(_log_maintenance_failure)

    # -- end of run -----------------------------------------------------------------------
    def release(self) -> None:
        """Teardown releases every hold."""
        self._released = True
        for _, fut in list(self._waiters):
            if not fut.done():
                fut.set_result("released")

    def finish(self) -> list[dict[str, Any]]:
        self.release()
        for off in self._offs:
            off()
        self.violations.extend(unused_fences(self.specs, self.engaged))
        return self.violations


def unused_fences(specs: list[Fence], engaged: list[bool]) -> list[dict[str, Any]]:
    """FENCE_UNUSED for each fence not engaged; `engaged` may be shorter (never installed)."""
    return [
        {"code": "FENCE_UNUSED", "agent": fence.spec.agent,
         "message": f"fence {i + 1} ({fence.kind} on {fence.spec.agent}) never engaged"}
        for i, fence in enumerate(specs)
        if not (i < len(engaged) and engaged[i])
    ]


def _matches(turn: int | None, step: int | None, ctx: PreStep) -> bool:
    return (turn is None or turn == ctx.turn) and (step is None or step == ctx.step)


def named_agents(specs: Iterable[Fence]) -> set[str]:
    """The agents whose facts some fence can read: every agent a condition names, and each
    maintenance's own agent (its `afterTurn`). Facts of any other agent decide nothing, so an
    engine that ships facts between processes need not ship them (issue 12 item 7)."""
    names: set[str] = set()
    for fence in specs:
        spec = fence.hold or fence.maintenance
        if spec is not None:
            names.update(_condition_agents(spec.until))
        if fence.maintenance is not None:
            names.add(fence.maintenance.agent)
    return names


def user_agents(actions: Iterable[UserAction]) -> set[str]:
    """The agents a transcript's user actions' conditions name (scripted_user.py): on Temporal
    their facts go on the board too, for the client that makes the actions (engines/remote_user.py)."""
    return {key for action in actions for part in (action.interrupt, action.send) if part is not None
            for key in _condition_agents(part.when)}


def _condition_agents(cond: Condition) -> list[str]:
    """Every agent a condition names (the ones `holds` reads), `all`/`any` included."""
    if cond.all is not None or cond.any is not None:
        return [key for sub in (cond.all or []) + (cond.any or []) for key in _condition_agents(sub)]
    parts = (cond.inbox_accepted, cond.turn_ended, cond.hang_reached, cond.parked, cond.step_reached, cond.settled)
    return [part.agent for part in parts if part is not None]


def _log_maintenance_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.warning("fence maintenance ended with %s", fut.exception())
