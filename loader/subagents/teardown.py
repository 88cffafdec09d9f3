"""The memoized disposal transaction (SPEC §8.11) and drains (§8.12).

Order matters and is fixed: span S5 opens the disposal top-down (assign, poke, cancel, start the idle
wait, open owned children); children release first; terminal facts are read from the epoch's own
log while the child is still registered; span S6 removes the Activation, sends the notice and only
then releases ownership (§9.3 rule 1, "send before release_ownership").
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Iterable, Mapping, Set
from typing import TYPE_CHECKING, Any, Protocol

from dsh.loader.agent import epoch_stop_reason, final_output, fold_consumed_work
from dsh.loader.errors import SubagentError, error_chain
from dsh.loader.subagents.activation import state_of
from dsh.loader.subagents.errors import err
from dsh.loader.subagents.notice import NoticeDetail, NoticeHost, notify_settlement, settlement_detail, teardown_detail
from dsh.loader.texts import TEXTS, render

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.emitter import Emitter
    from dsh.loader.subagents.activation import Activation
    from dsh.loader.subagents.config import Materialization

__all__ = ["Residency", "dispose", "drain", "drain_children", "drain_descendants", "watch"]

logger = logging.getLogger(__name__)


class Residency(NoticeHost, Protocol):
    """What teardown reads of the continuation manager and the writes it asks of it; the manager
    (manager.py) is the one implementation, and each write method states the invariant it keeps."""

    @property
    def activations(self) -> Mapping[str, Activation]: ...
    @property
    def materializations(self) -> Set[Materialization]: ...
    @property
    def events(self) -> Emitter: ...
    def live_lineage(self, agent: Agent) -> list[Agent]: ...
    def pulse(self) -> None: ...
    def poke(self, a: Activation) -> None: ...
    def open_disposal(self, a: Activation, done: asyncio.Future[None]) -> None: ...
    def remove_activation(self, a: Activation) -> None: ...
    def release_ownership(self, child_id: str) -> None: ...
    def start_draining(self) -> None: ...
    def close_scope(self, root: Agent, members: Iterable[Agent]) -> None: ...



def watch(m: Residency, a: Activation) -> None:
    """Start the watcher (§8.10) of `a`: dispose it once it reads settled under its child lock.

    Callbacks, not a task (issue 13): a task's first step, its wake future per wait and the lock's
    futures per decision were ~a task, four futures and a dozen callbacks per child. The first
    wait starts one loop pass later, where the task's first step ran, so the submission that
    follows a materialization in the same pass is accepted before the first decision.
    """
    asyncio.get_running_loop().call_soon(_Watcher(m, a).arm, True)


class _Watcher:
    """One Activation's watcher. Each `arm` is a generation: a wake from an older one (the poke
    or the idle callback that lost the race) is a no-op, as the loser of `first_completed` was."""

    __slots__ = ("m", "a", "_armed", "_poked")

    def __init__(self, m: Residency, a: Activation) -> None:
        self.m = m
        self.a = a
        self._armed: object | None = None
        self._poked: asyncio.Future[None] = a.poke

    def arm(self, idle: bool) -> None:
        """Wait for the agent's idleness or the poke current now; then decide."""
        a = self.a
        if a.disposal is not None:
            return
        self._poked = a.poke  # a poke during the decision below makes a kept child re-decide
        self._wait(self._poked, idle)

    def _wait(self, poke: asyncio.Future[None], idle: bool) -> None:
        token = self._armed = object()
        poke.add_done_callback(functools.partial(self._woken, token, idle))
        if idle:
            self.a.agent.call_when_idle(functools.partial(self._woken, token, True))

    def _woken(self, token: object, decide: bool, *_: object) -> None:
        if token is not self._armed:
            return
        self._armed = None
        if self.a.disposal is not None:
            return
        if decide:
            self._decide()
        else:
            self.arm(True)

    def _decide(self, *_: object) -> None:
        a = self.a
        busy = self.m.locks.tail(a.child_id)
        if busy is not None:  # an operation holds or waits for the child lock: decide after it
            busy.add_done_callback(self._decide)
            return
        try:
            # --- S7 begin: the child lock is free and nothing below awaits, so no locked operation
            # interleaves; a concurrent delivery either won admission already or waits for the release.
            if a.disposal is not None:
                return
            if state_of(a) != "settled":
                if a.agent.status == "running":
                    self.arm(True)
                else:  # waiting on children, or parked: only the poke of this wait re-arms
                    self._wait(self._poked, False)
                return
            dispose(self.m, a)  # failures are logged by the disposal transaction (T-LOG-TEARDOWN-FAILED)
            # --- S7 end ---
        except Exception:
            logger.exception("the settlement watcher of %s failed", a.child_id)


def dispose(m: Residency, a: Activation) -> asyncio.Future[None]:
    if a.disposal is not None:
        return a.disposal
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    done.add_done_callback(_retrieve)
    # --- S5 begin: cancellation propagates top-down atomically ---
    m.open_disposal(a, done)  # (0) the admission cutoff, (1) poke
    a.agent.cancel({"kind": "parent"})  # (2) clears the inbox durably, aborts the turn
    idle: asyncio.Future[None] = loop.create_future()  # (3) the wait starts now (a callback, no task)
    a.agent.call_when_idle(functools.partial(_resolve, idle))
    children = [
        dispose(m, child)  # (4)
        for cid in sorted(a.owned_children)
        if (child := m.activations.get(cid)) is not None
    ]
    # --- S5 end ---
    m.pulse()
    task = loop.create_task(_transaction(m, a, idle, children, done), name=f"dispose:{a.child_id}")
    task.add_done_callback(lambda t: _settle_on_crash(t, done))
    return done


def _settle_on_crash(task: asyncio.Task[None], done: asyncio.Future[None]) -> None:
    """A transaction that crashed must still resolve its disposal: drains and followups await it."""
    if done.done():
        return
    if task.cancelled():
        done.cancel()
        return
    exc = task.exception()
    logger.error("the disposal transaction crashed", exc_info=exc)
    done.set_exception(exc if exc is not None else RuntimeError("disposal ended without a result"))


async def _transaction(
    m: Residency,
    a: Activation,
    idle: asyncio.Future[None],
    children: list[asyncio.Future[None]],
    done: asyncio.Future[None],
) -> None:
    failures: list[BaseException] = []
    if children:  # a leaf awaits no gather: a future and a loop hop less per child (issue 13)
        for result in await asyncio.gather(*children, return_exceptions=True):  # (5) child-first
            if isinstance(result, BaseException):
                failures.append(result)
    try:
        await idle  # (6)
    except Exception as exc:
        failures.append(exc)
    child = a.agent
    try:
        await m.store.flush(child.session)  # (7)
    except Exception as exc:
        logger.warning(TEXTS["T-LOG-FLUSH-FAILED"].format(id=a.child_id, detail=error_chain(exc)))
    stop_reason: str = "error"
    output: list[dict[str, Any]] | None = None
    detail: NoticeDetail = {}
    try:
        suffix = child.session.events[a.boundary :]  # (8) terminal facts, still registered
        stop_reason = epoch_stop_reason(fold_consumed_work(suffix))
        output = final_output(suffix)
        detail = settlement_detail(stop_reason, suffix)  # issue 16 item 5: the notice names the failure
    except Exception as exc:
        # A log the fold cannot read must not strand the Activation: the failure joins step 10,
        # so the tail still runs (remove, notice `error`, release) and the disposal fails typed.
        failures.append(exc)
    try:
        await child.dispose()  # (9)
    except Exception as exc:
        failures.append(exc)
    failure: SubagentError | None = None
    if failures:  # (10)
        chain = "; ".join(error_chain(f) for f in failures)
        failure = SubagentError("ACTIVATION_TEARDOWN_FAILED", render("T-ERR-TEARDOWN", id=a.child_id, detail=chain))
        logger.warning(TEXTS["T-LOG-TEARDOWN-FAILED"].format(id=a.child_id, detail=chain))
        stop_reason, output = "error", None
        detail = teardown_detail(failure.code, failure.message)
    # --- S6 begin: no observer can see "no Activation and no notice" ---
    m.remove_activation(a)  # (11)
    notify_settlement(m, a, stop_reason, output, detail)  # (12) rule "send before release_ownership"
    m.release_ownership(a.child_id)  # (13)
    # --- S6 end ---
    edge: dict[str, Any] = {
        "sessionId": a.child_id,
        "parentSessionId": a.parent_session,
        "epoch": a.epoch,
        "stopReason": stop_reason,
    }
    if output:
        edge["output"] = output
    m.events.emit("subagent/end", edge)  # (14)
    m.pulse()
    if failure is not None:
        done.set_exception(failure)
    else:
        done.set_result(None)


def _resolve(fut: asyncio.Future[None], *_: object) -> None:
    if not fut.done():
        fut.set_result(None)


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _aggregate(results: list[Any]) -> None:
    failures = [r for r in results if isinstance(r, BaseException)]
    if failures:
        raise SubagentError("ACTIVATION_TEARDOWN_FAILED", "; ".join(error_chain(f) for f in failures))


async def drain(m: Residency) -> None:
    """Manager-wide drain (shutdown)."""
    m.start_draining()  # S10: admission closes before the first await
    while m.materializations:
        await asyncio.gather(*[x.settled for x in list(m.materializations)])
    owned = {cid for a in m.activations.values() for cid in a.owned_children}
    roots = [a for a in list(m.activations.values()) if a.child_id not in owned]
    _aggregate(await asyncio.gather(*[dispose(m, a) for a in roots], return_exceptions=True))


async def drain_descendants(m: Residency, parents: list[Agent]) -> None:
    """Scoped drain below host roots; each root stays closed until it leaves the registry."""
    roots = [p for p in parents if m.live_agent(p.id) is p]
    # --- S10 begin ---
    targets: list[Activation] = []
    for root in roots:
        members: set[Agent] = set()
        for a in list(m.activations.values()):
            if root in a.ancestry and a.agent is not root:
                targets.append(a)
                members.add(a.agent)
                members.update(m.live_lineage(a.agent))
        m.close_scope(root, members)
    targets.sort(key=lambda a: int(a.agent.header.get("delegationDepth", 0)))  # top-down
    disposals = [dispose(m, a) for a in targets]
    # --- S10 end ---
    m.pulse()
    selected = [x.settled for x in list(m.materializations) if any(r in x.lineage for r in roots)]
    await asyncio.gather(*selected)
    _aggregate(await asyncio.gather(*disposals, return_exceptions=True))


async def drain_children(m: Residency, parent: Agent, ids: list[str]) -> None:
    """Selected drain: release some of `parent`'s own children; the parent keeps admitting."""
    if m.live_agent(parent.id) is not parent:
        raise err("UNAUTHORIZED", "T-ERR-STALE", aid=parent.id)
    targets: list[Activation] = []
    for cid in dict.fromkeys(ids):
        a = m.activations.get(cid)
        if a is None:
            continue
        if a.parent_session != parent.id or parent not in a.ancestry:
            raise err("UNAUTHORIZED", "T-ERR-NOT-CHILD", pid=parent.id, id=cid)
        targets.append(a)
    disposals = [dispose(m, a) for a in targets]
    _aggregate(await asyncio.gather(*disposals, return_exceptions=True))
