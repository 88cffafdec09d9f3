"""The continuation manager (SPEC §8): residency, admission, delivery and settlement of continuable
children.

The child's inbox is the only queue. The manager decides *where* a delivery lands (a live inbox, or a
cold resume that opens a new epoch) and *when* an Activation may end (the watcher, §8.10). It is the
one writer of its state: teardown, drains and the watcher (`teardown.py`), the settlement notice
(`notice.py`) and crash recovery (`recovery.py`) change it only through the methods below, each of
which names the invariant it keeps. One-shot children live in `oneshot.py`; the header checks of a
cold resume in `coldresume.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import AbortSignal
from dsh.loader.agent import Agent, user_message
from dsh.loader.emitter import Emitter
from dsh.loader.ids import is_valid_session_id, new_child_id
from dsh.loader.session import Session, make_header
from dsh.loader.subagents.activation import Activation, Ancestry
from dsh.loader.subagents.coldresume import read_resumable
from dsh.loader.subagents.config import AgentFactory, ManagerConfig, Materialization
from dsh.loader.subagents.epochs import EPOCH_EVENT, next_epoch
from dsh.loader.subagents.errors import err
from dsh.loader.subagents.lock import ChildLock
from dsh.loader.subagents.materialize import ChildAgents
from dsh.loader.subagents.teardown import dispose, watch

if TYPE_CHECKING:
    from dsh.loader.agent import AgentRegistry
    from dsh.loader.session import SessionStore

__all__ = ["AgentFactory", "ContinuationManager", "ManagerConfig", "Materialization"]

logger = logging.getLogger(__name__)

Content = str | list[dict[str, Any]]


class _Lost:
    """A delivery that met an open disposal: retry after full release (§8.7)."""


LOST = _Lost()


@dataclass
class _Counters:
    epochs: dict[str, int] = field(default_factory=dict)  # child id -> latest epoch resident here


class ContinuationManager:
    """Residency and admission of continuable children (§8): which child is loaded, which delivery
    may land in which inbox, and when an Activation may end.

    Fields and the invariants they keep (only this class's methods write them):
    - `activations[child_id]` is the child's current residency; an entry exists from the
      materialization (or recovery install) that opened the epoch until span S6 removes it
      (`remove_activation`), and `disposal is None` exactly while it still admits deliveries (S4
      checks it; S5 sets it through `open_disposal`).
    - every id in some `activations[p].owned_children` names a child still in `activations`
      (`release_ownership` runs in S6 right after the notice), so an owner reads `waiting` and never
      settles while a child it owns is resident.
    - `materializations` holds every cold resume or start still between its first await and its
      first delivery; quiescence (S11) reads RUNNING while it is non-empty.
    - `draining` only ever goes False -> True (`start_draining`, S10, before the first await); once
      True, and for every agent under a root in `closing_scopes` (`close_scope`), `closing_for`
      refuses new work. A scope lasts until that exact root Agent leaves the registry.
    - `counters.epochs[child_id]` is the epoch of the child's latest residency in this process.
    - `offline_deliveries` holds the durable notice writes into parents not live here that are
      still running (`track_offline`); shutdown awaits them.
    - `locks` serializes operations per child id.
    """

    def __init__(
        self,
        *,
        registry: AgentRegistry,
        store: SessionStore,
        factory: AgentFactory | None = None,
        config: ManagerConfig | None = None,
        descriptor_hook: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self.registry = registry
        self.store = store
        self.config = config or ManagerConfig()
        self.agents = ChildAgents(store, registry, factory, descriptor_hook)
        self.activations: dict[str, Activation] = {}
        # Reverse index of `owned_children`: child id -> {owner id: owner Activation}, in order.
        self._owners: dict[str, dict[str, Activation]] = {}
        self.materializations: set[Materialization] = set()
        self.locks = ChildLock()
        self.closing_scopes: dict[Agent, set[Agent]] = {}
        self.draining = False
        self.events = Emitter()  # subagent/start, subagent/end, changed
        self.counters = _Counters()
        # Durable notice writes into parents that are not live here (notice.py); shutdown awaits them.
        self.offline_deliveries: set[asyncio.Task[None]] = set()
        registry.events.on("agent/disposed", self._forget_scope)

    # -- pulses ---------------------------------------------------------------------------
    def pulse(self) -> None:
        self.events.emit("changed", None)

    def poke(self, a: Activation) -> None:
        a.renew_poke()

    def _forget_scope(self, payload: dict[str, Any]) -> None:
        # The scope closes until *that exact* root Agent leaves the registry (§8.4).
        self.closing_scopes.pop(payload["agent"], None)

    # -- the writes (each keeps one invariant of the class docstring) ----------------------
    def install_activation(self, a: Activation) -> None:
        """The epoch's residency begins: `a` becomes the child's one entry in `activations`."""
        self.counters.epochs[a.child_id] = a.epoch
        self.activations[a.child_id] = a

    def remove_activation(self, a: Activation) -> None:
        """S6 step 11 (or a rollback): the residency ends; a newer residency's entry is kept."""
        if self.activations.get(a.child_id) is a:
            del self.activations[a.child_id]

    def open_disposal(self, a: Activation, done: asyncio.Future[None]) -> None:
        """S5 steps 0-1, the admission cutoff: from here S4 refuses `a`; its watcher re-decides."""
        assert a.disposal is None, "a disposal opens once (it is memoized)"
        a.disposal = done
        self.poke(a)

    def start_draining(self) -> None:
        """S10 of a manager-wide drain: admission closes for good (False -> True, never back)."""
        self.draining = True
        self.pulse()

    def close_scope(self, root: Agent, members: Iterable[Agent]) -> None:
        """S10 of a scoped drain: `root`'s subtree refuses new work until `root` is disposed."""
        self.closing_scopes.setdefault(root, set()).update(members)

    def track_offline(self, task: asyncio.Task[None]) -> None:
        """A durable notice write into a parent not live here; shutdown awaits it (notice.py)."""
        self.offline_deliveries.add(task)
        task.add_done_callback(self.offline_deliveries.discard)

    # -- facts for notice.py and teardown.py ----------------------------------------------
    def live_agent(self, session_id: str) -> Agent | None:
        return self.registry.get(session_id)

    def own_activation(self, agent: Agent) -> Activation | None:
        """`agent`'s current residency, if `agent` is the resident Agent of its id."""
        a = self.activations.get(agent.id)
        return a if a is not None and a.agent is agent else None

    # -- admission (§8.5) -----------------------------------------------------------------
    def live_lineage(self, agent: Agent) -> list[Agent]:
        lineage = [agent]
        seen = {agent.id}
        current = agent
        while True:
            parent_id = current.header.get("parentSession")
            if not parent_id or parent_id in seen:
                return lineage
            parent = self.registry.get(parent_id)
            if parent is None:
                return lineage
            seen.add(parent_id)
            lineage.append(parent)
            current = parent

    def closing_for(self, agent: Agent) -> str | None:
        if self.draining:
            return "manager"
        lineage: list[Agent] | None = None
        for root, members in self.closing_scopes.items():
            if agent in members:
                return root.id
            if lineage is None:
                lineage = self.live_lineage(agent)
            if any(x is root for x in lineage):
                return root.id
        return None

    def assert_admitting(self, agent: Agent) -> None:
        closing = self.closing_for(agent)
        if closing == "manager":
            raise err("DRAINING", "T-ERR-DRAINING")
        if closing is not None:
            raise err("DRAINING", "T-ERR-DRAINING-SCOPED", root=closing)

    # -- ownership (§8.9) -----------------------------------------------------------------
    def acquire_ownership(self, parent: Agent, child_id: str) -> None:
        pa = self.activations.get(parent.id)
        if pa is None:
            return  # the root owns nothing: it never joins the waiting graph
        if pa.disposal is not None:
            raise err("ACTIVATION_CLOSING", "T-ERR-CLOSING-PARENT", pid=parent.id)
        pa.owned_children.add(child_id)
        self._owners.setdefault(child_id, {})[parent.id] = pa

    def release_ownership(self, child_id: str) -> None:
        # Through the reverse index (issue 13: iterating every live Activation per settlement was
        # O(N²) with many resident children); owners in acquisition order, each still live.
        for owner_id, owner in self._owners.pop(child_id, {}).items():
            if self.activations.get(owner_id) is owner and child_id in owner.owned_children:
                owner.owned_children.discard(child_id)
                self.poke(owner)

    def admit_waking(self, a: Activation, message_id: str, send: Callable[[], object]) -> None:
        # Rule "waking sends go through admit_waking" (§9.3 rule 2): observers of the send must
        # already see the Activation busy, so the id is added *before* the send.
        a.accepted.add(message_id)
        try:
            send()
        except BaseException:
            a.accepted.discard(message_id)
            raise
        self.poke(a)

    def admit_restored(self, a: Activation, message_ids: Iterable[str], resume: Callable[[], object]) -> None:
        """Restored pending items count as accepted waking work before the driver resumes them."""
        a.accepted.update(message_ids)
        resume()
        self.poke(a)

    # -- start (§8.6) ---------------------------------------------------------------------
    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]:
        """Resolves at inbox acceptance of the prompt; afterwards the caller's signal is irrelevant."""
        self.assert_admitting(parent)
        depth = self.config.child_depth(parent)
        child_id = new_child_id()
        descriptor = self.config.descriptor("continuable", label, spawn_call_id)
        header = make_header(
            child_id, parent_session=parent.id, origin="subagent", delegation_depth=depth,
            cwd=parent.header.get("cwd"),
        )

        async def op() -> tuple[str, str]:
            signal.throw_if_aborted()
            self.assert_admitting(parent)
            if self.registry.get(child_id) is not None or self.store.exists(child_id):
                raise err("DUPLICATE_CHILD", "T-ERR-DUPLICATE", id=child_id)
            a = await self._materialize(parent, signal, header=header, descriptor=descriptor)
            message_id = await self._submit_materialized(a, prompt, {"kind": "user"}, parent, signal)
            return child_id, message_id

        return await self.locks.run(child_id, op)

    # -- followup (§8.7) ------------------------------------------------------------------
    async def followup(
        self, parent: Agent, child_id: str, content: Content, source: dict[str, Any], signal: AbortSignal
    ) -> str:
        self.assert_admitting(parent)

        async def op() -> str | _Lost:
            a = self.activations.get(child_id)
            if a is None:
                return await self._cold_resume(parent, child_id, content, source, signal)
            if a.disposal is not None:
                try:
                    await asyncio.shield(a.disposal)
                except Exception:
                    pass  # its outcome is the settling epoch's business
                return LOST
            return self._submit_admitted(a, content, source, parent, signal)

        while True:
            result = await self.locks.run(child_id, op)
            if not isinstance(result, _Lost):
                return result
            self.assert_admitting(parent)
            signal.throw_if_aborted()

    async def _cold_resume(
        self, parent: Agent, child_id: str, content: Content, source: dict[str, Any], signal: AbortSignal
    ) -> str:
        if not is_valid_session_id(child_id):
            raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id)
        # A cold resume counts as a materialization from its first await: until the Activation
        # exists, this entry is what keeps the runner's quiescence check (S11) from reading DONE.
        with self.pending(parent):
            session, descriptor = await read_resumable(
                self.store, parent, child_id, signal, lambda: self.assert_admitting(parent)
            )
            a = await self._materialize(parent, signal, session=session, descriptor=descriptor)
            return await self._submit_materialized(a, content, source, parent, signal)

    @contextlib.contextmanager
    def pending(self, parent: Agent) -> Iterator[Materialization]:
        m = Materialization(self.live_lineage(parent), asyncio.get_running_loop().create_future())
        self.materializations.add(m)
        self.pulse()
        try:
            yield m
        finally:
            self.materializations.discard(m)
            m.settled.set_result(None)
            self.pulse()

    # -- materialization (§8.8) -----------------------------------------------------------
    async def _materialize(
        self, parent: Agent, signal: AbortSignal, *, descriptor: dict[str, Any],
        header: dict[str, Any] | None = None, session: Session | None = None,
    ) -> Activation:
        self.assert_admitting(parent)
        with self.pending(parent):
            if session is None:
                assert header is not None
                agent = await self.agents.create(header, descriptor, "continuable")
            else:
                agent = await self.agents.adopt_or_close(session, descriptor)
            child_id = agent.id
            # The epoch is a durable fact (epochs.py): its number and start are read back from the
            # child's log after a crash, so the notice it owes keeps one id across processes.
            epoch = next_epoch(agent.session.events)
            a = Activation(
                child_id=child_id,
                parent_session=parent.id,
                agent=agent,
                ancestry=Ancestry([agent, *self.live_lineage(parent)]),
                boundary=len(agent.session.events),
                epoch=epoch,
            )
            self.install_activation(a)
            self.pulse()
            try:
                agent.session.append_owned(EPOCH_EVENT, {"epoch": epoch}, ignorable=True)
                signal.throw_if_aborted()
                self.assert_admitting(parent)
                self.acquire_ownership(parent, child_id)
                self.watch_inbox(a)
                self.events.emit(
                    "subagent/start", {"sessionId": child_id, "parentSessionId": parent.id, "epoch": epoch}
                )
            except BaseException:
                # Roll back: no notice and no end edge for an epoch that never accepted work.
                await agent.dispose()
                self.remove_activation(a)
                self.release_ownership(child_id)
                self.pulse()
                raise
            self.start_watcher(a)
            return a

    def watch_inbox(self, a: Activation) -> None:
        """Claims and discards of accepted ids make the watcher re-decide (§8.8 step 4)."""
        agent = a.agent
        agent.add_cleanup(agent.events.on("agent/inbox/claimed", self._unaccept(a)))
        agent.add_cleanup(agent.events.on("agent/inbox/discarded", self._unaccept(a)))

    def start_watcher(self, a: Activation) -> None:
        """Residency is complete (interrupts act from now); `teardown.watch` decides its end."""
        a.resident = True
        watch(self, a)

    def _unaccept(self, a: Activation) -> Callable[[dict[str, Any]], None]:
        def listener(payload: dict[str, Any]) -> None:
            message_id = payload["message"]["id"]
            if message_id in a.accepted:
                a.accepted.discard(message_id)
                self.poke(a)

        return listener

    # -- submission (§8.9) ----------------------------------------------------------------
    async def _submit_materialized(
        self, a: Activation, content: Content, source: dict[str, Any], parent: Agent, signal: AbortSignal
    ) -> str:
        try:
            return self._submit_admitted(a, content, source, parent, signal)
        except BaseException:
            try:
                await self.dispose(a)  # `announced` is False: no notice
            except Exception:
                logger.debug("disposal after a failed submission of %s failed", a.child_id, exc_info=True)
            raise

    def _submit_admitted(
        self, a: Activation, content: Content, source: dict[str, Any], parent: Agent, signal: AbortSignal
    ) -> str:
        # Sync span S4, the final cutoff: a delivery either lands in a live inbox or sees an open
        # disposal. No await may appear in this function.
        signal.throw_if_aborted()
        self.assert_admitting(parent)
        if a.disposal is not None:
            raise err("ACTIVATION_CLOSING", "T-ERR-CLOSING-MESSAGE", id=a.child_id)
        if self.registry.get(parent.id) is not parent:
            raise err("UNAUTHORIZED", "T-ERR-STALE", aid=parent.id)
        if a.agent.header.get("parentSession") != parent.id:
            raise err("UNAUTHORIZED", "T-ERR-NOT-PARENT", id=a.child_id)
        self.acquire_ownership(parent, a.child_id)
        message = user_message(content, source)
        self.admit_waking(a, message["id"], lambda: a.agent.followup(message))
        a.announced = True
        return str(message["id"])

    def dispose(self, a: Activation) -> asyncio.Future[None]:
        """The memoized disposal transaction of `a` (teardown.py, §8.11)."""
        return dispose(self, a)

