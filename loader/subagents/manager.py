"""The continuation manager (SPEC §8): residency, admission, delivery and settlement of continuable
children.

The child's inbox is the only queue. The manager decides *where* a delivery lands (a live inbox, or a
cold resume that opens a new epoch) and *when* an Activation may end (the watcher, §8.10). Teardown,
drains and the settlement tail live in `teardown.py`; one-shot children in `oneshot.py`.

Invariants:
- `activations[id].disposal is None` for every Activation still admitting deliveries;
- every entry of `owned_children` names an Activation that is still in `activations`;
- a delivery either lands in a live inbox (S4) or waits for full release and cold-resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from loader.abort import AbortSignal
from loader.agent import Agent, user_message
from loader.emitter import Emitter
from loader.errors import ConfigError, DshError, SessionError
from loader.ids import is_valid_session_id, new_child_id
from loader.session import Session, make_header
from loader.subagents.activation import Activation, state_of
from loader.subagents.epochs import EPOCH_EVENT, next_epoch
from loader.subagents.errors import err
from loader.subagents.lock import ChildLock

if TYPE_CHECKING:
    from loader.agent import AgentRegistry
    from loader.session import SessionStore

__all__ = ["AgentFactory", "ContinuationManager", "ManagerConfig", "Materialization"]

logger = logging.getLogger(__name__)

AgentMode = Literal["root", "continuable", "one-shot"]


class AgentFactory(Protocol):
    """Builds an Agent for a session with the tools its shape may see (§8.1); supplied by headless."""

    def __call__(self, session: Session, mode: AgentMode) -> Agent: ...


REPORT_DELIVERIES = ("wakeup", "quiet")


@dataclass(frozen=True)
class ManagerConfig:
    max_depth: int = 3
    report_delivery: Literal["wakeup", "quiet"] = "wakeup"
    model: str | None = None

    def __post_init__(self) -> None:
        # §11.1 / §24 item 1: exactly these two spellings; anything else is a configuration error.
        if self.report_delivery not in REPORT_DELIVERIES:
            raise ConfigError(
                f"subagents.reportDelivery: expected 'wakeup' or 'quiet', got {self.report_delivery!r}"
            )


@dataclass(eq=False)
class Materialization:
    lineage: list[Agent]
    settled: asyncio.Future[None]


class _Lost:
    """A delivery that met an open disposal: retry after full release (§8.7)."""


LOST = _Lost()
KEEP = object()


@dataclass
class _Counters:
    epochs: dict[str, int] = field(default_factory=dict)
    settled: dict[str, int] = field(default_factory=dict)


class ContinuationManager:
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
        self.factory = factory
        self.config = config or ManagerConfig()
        self.descriptor_hook = descriptor_hook
        self.activations: dict[str, Activation] = {}
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

    def release_ownership(self, child_id: str) -> None:
        for owner in self.activations.values():
            if child_id in owner.owned_children:
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

    # -- start (§8.6) ---------------------------------------------------------------------
    def child_depth(self, parent: Agent) -> int:
        depth = int(parent.header.get("delegationDepth", 0)) + 1
        if depth > self.config.max_depth:
            raise err("DEPTH_EXCEEDED", "T-ERR-DEPTH", depth=depth, max=self.config.max_depth)
        return depth

    def descriptor(self, mode: str, label: str, spawn_call_id: str | None) -> dict[str, Any]:
        d: dict[str, Any] = {"version": 1, "mode": mode, "provider": "spawn", "label": label}
        if self.config.model:
            d["model"] = self.config.model
        if spawn_call_id:
            d["spawnCallId"] = spawn_call_id
        return d

    async def start_continuable(
        self, parent: Agent, label: str, prompt: str, spawn_call_id: str | None, signal: AbortSignal
    ) -> tuple[str, str]:
        """Resolves at inbox acceptance of the prompt; afterwards the caller's signal is irrelevant."""
        self.assert_admitting(parent)
        depth = self.child_depth(parent)
        child_id = new_child_id()
        descriptor = self.descriptor("continuable", label, spawn_call_id)
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

    async def create_child_agent(
        self, header: dict[str, Any], descriptor: dict[str, Any], mode: AgentMode
    ) -> Agent:
        """Create the durable child session (descriptor first, §8.2) and its registered agent."""
        assert self.factory is not None, "the manager needs an agent factory"
        session = await self.store.create(header)
        try:
            # The agent exists before the descriptor is appended so that observers attached by the
            # factory (e.g. `--json`) see every event of the session; nothing runs until a send.
            if self.descriptor_hook is not None:
                self.descriptor_hook(session.id, descriptor)
            agent = self.factory(session, mode)
            session.append("subagent/descriptor", descriptor)
            self.registry.register(agent)
        except BaseException:
            await self.store.close(session)
            raise
        return agent

    # -- followup (§8.7) ------------------------------------------------------------------
    async def followup(
        self,
        parent: Agent,
        child_id: str,
        content: str | list[dict[str, Any]],
        source: dict[str, Any],
        signal: AbortSignal,
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
        self,
        parent: Agent,
        child_id: str,
        content: str | list[dict[str, Any]],
        source: dict[str, Any],
        signal: AbortSignal,
    ) -> str:
        if not is_valid_session_id(child_id):
            raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id)
        # A cold resume counts as a materialization from its first await: until the Activation
        # exists, this entry is what keeps the runner's quiescence check (S11) from reading DONE.
        with self.pending(parent):
            try:
                if self.store.inline_io:  # replay: no thread decides the order (SPEC §26 item 1)
                    found = self.store.read(child_id)
                else:
                    found = await asyncio.to_thread(self.store.read, child_id)
            except SessionError as exc:
                signal.throw_if_aborted()
                raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id) from exc
            signal.throw_if_aborted()
            self.assert_admitting(parent)
            # Authorize against the header read-only, before anything is written or repaired (§22).
            if found.header.get("parentSession") != parent.id:
                raise err("UNAUTHORIZED", "T-ERR-NOT-PARENT", id=child_id)
            descriptor = next((e["data"] for e in found.events if e["type"] == "subagent/descriptor"), None)
            if descriptor is None or descriptor.get("mode") != "continuable":
                raise err("NOT_RESUMABLE", "T-ERR-NOT-CONTINUABLE", id=child_id)
            try:
                session = await self.store.load(child_id)
            except DshError as exc:
                raise err("NOT_RESUMABLE", "T-ERR-NOT-FOUND", id=child_id) from exc
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
        self,
        parent: Agent,
        signal: AbortSignal,
        *,
        header: dict[str, Any] | None = None,
        session: Session | None = None,
        descriptor: dict[str, Any],
    ) -> Activation:
        self.assert_admitting(parent)
        with self.pending(parent):
            if session is None:
                assert header is not None
                agent = await self.create_child_agent(header, descriptor, "continuable")
            else:
                assert self.factory is not None, "the manager needs an agent factory"
                if self.descriptor_hook is not None:
                    self.descriptor_hook(session.id, descriptor)
                try:
                    agent = self.factory(session, "continuable")
                    self.registry.register(agent)
                except BaseException:
                    await self.store.close(session)
                    raise
            child_id = agent.id
            # The epoch is a durable fact (epochs.py): its number and start are read back from the
            # child's log after a crash, so the notice it owes keeps one id across processes.
            epoch = next_epoch(agent.session.events)
            self.counters.epochs[child_id] = epoch
            a = Activation(
                child_id=child_id,
                parent_session=parent.id,
                agent=agent,
                ancestry=weakref.WeakSet([agent, *self.live_lineage(parent)]),
                boundary=len(agent.session.events),
                epoch=epoch,
            )
            self.activations[child_id] = a
            self.pulse()
            try:
                agent.session.append(EPOCH_EVENT, {"epoch": epoch}, ignorable=True)
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
                if self.activations.get(child_id) is a:
                    del self.activations[child_id]
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
        a.resident = True
        a.watcher = asyncio.create_task(self._watch(a), name=f"watcher:{a.child_id}")
        a.watcher.add_done_callback(_log_failure)

    def _unaccept(self, a: Activation) -> Callable[[dict[str, Any]], None]:
        def listener(payload: dict[str, Any]) -> None:
            message_id = payload["message"]["id"]
            if message_id in a.accepted:
                a.accepted.discard(message_id)
                self.poke(a)

        return listener

    # -- submission (§8.9) ----------------------------------------------------------------
    async def _submit_materialized(
        self,
        a: Activation,
        content: str | list[dict[str, Any]],
        source: dict[str, Any],
        parent: Agent,
        signal: AbortSignal,
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
        self,
        a: Activation,
        content: str | list[dict[str, Any]],
        source: dict[str, Any],
        parent: Agent,
        signal: AbortSignal,
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

    # -- the watcher (§8.10) --------------------------------------------------------------
    async def _watch(self, a: Activation) -> None:
        from loader.subagents.teardown import dispose

        while a.disposal is None:
            poked = a.poke
            idle = asyncio.ensure_future(a.agent.when_idle())
            try:
                await asyncio.wait({idle, poked}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not idle.done():
                    idle.cancel()
            if a.disposal is not None:
                return

            async def decide() -> Any:
                # Sync span S7 (inside the child lock): a concurrent delivery either won admission
                # already or waits for the release.
                if a.disposal is not None or state_of(a) != "settled":
                    return KEEP
                return dispose(self, a)

            decision = await self.locks.run(a.child_id, decide)
            if decision is KEEP:
                if a.agent.status != "running":
                    await poked  # waiting on children, or parked
                continue
            try:
                await decision
            except Exception:
                pass  # logged by the disposal transaction (T-LOG-TEARDOWN-FAILED)
            return

    def dispose(self, a: Activation) -> asyncio.Future[None]:
        from loader.subagents.teardown import dispose

        return dispose(self, a)


def _log_failure(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("task %s failed", task.get_name(), exc_info=task.exception())
