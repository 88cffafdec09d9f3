"""The agent (SPEC §6): phases, sending, the latched wake, cancel, idle, maintenance and dispose.

An agent owns one `Session` and one `Inbox`. Its driver task runs turns while the phase is
`running`; the turn and step machinery lives in `loop.py`.

Invariants:
- every phase change goes through `_set_phase`, which emits `agent/status` only when the public
  status (`idle` | `running`) changes;
- `_activity` is the future of the current (or last) activity; it never fails, so `when_idle`
  resolves even when a driver crashed;
- a latch (`wake_requested`) is only ever set on a non-idle phase and is replayed exactly once, at
  convergence, and only when input is still pending.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from dsh.loader.abort import AbortController, AbortSignal, CancelCause
from dsh.loader.agent.inbox import Inbox, Message, Target
from dsh.loader.agent.loop import drive, open_turn
from dsh.loader.agent.phase import Idle, Maintenance, Phase, PreStep, Running
from dsh.loader.agent.tooling import Tool
from dsh.loader.emitter import Emitter, Waterfall
from dsh.loader.errors import AgentBusy
from dsh.loader.session import RequestLog, Session
from dsh.loader.texts import TEXTS

if TYPE_CHECKING:
    from dsh.loader.agent.registry import AgentRegistry
    from dsh.loader.models import ModelProvider
    from dsh.loader.session import SessionStore

__all__ = ["Agent", "AgentOptions", "Idle", "Maintenance", "PreStep", "Running"]  # phases re-exported from phase.py

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class AgentOptions:
    model: str = "replay"
    system_prompt: str = TEXTS["T-SYSTEM-DEFAULT"]
    max_parallel_tool_calls: int = 10
    max_steps_per_turn: int = 100
    max_tokens: int | None = None
    temperature: float | None = None


class Agent:
    """One conversation: a session, its inbox and at most one activity (driver or maintenance).

    Fields and the invariants they keep:
    - `id == session.id == header["id"]`, fixed for life; `inbox` is rebuilt from `session`'s
      splices, so the lists always equal what the log says is pending.
    - `_phase` changes only through `_set_phase`, which emits `agent/status` exactly when
      `status` flips between `idle` and `running`.
    - `_activity` is None before the first activity, else the future of the current or last one;
      it never fails and is resolved only by `converge`, after the phase is `Idle`.
    - `_driver` is the task of the last driver; a new one starts only from `Idle` (span S1).
    - `_disposal is not None` <=> `dispose()` was called; once set, no new driver starts and every
      caller of `dispose()` awaits the same future. `_cleanups` run once, in that future.
    - `pre_step` holds the checkpoint at order 0: every step is durable before a fence or hook
      sees it (§5.5).
    """

    def __init__(
        self,
        session: Session,
        *,
        store: SessionStore,
        provider: ModelProvider,
        tools: list[Tool] | None = None,
        options: AgentOptions | None = None,
        registry: AgentRegistry | None = None,
    ) -> None:
        self.id: str = session.id
        self.session = session
        self.header: dict[str, Any] = session.header
        self.store = store
        self.provider = provider
        self.tools: list[Tool] = list(tools or [])
        self.options = options or AgentOptions()
        self.registry = registry
        self.events = Emitter()
        self.inbox = Inbox(session, self.events)
        self.requests = RequestLog(session)  # what the model saw (issue 11 item 1)
        self.pre_step: Waterfall[PreStep] = Waterfall()
        # Checkpoint first (§5.5): every proposed step is durable before fences or hooks see it.
        self.pre_step.add(self._checkpoint, order=0)
        self._phase: Phase = Idle(last_turn=_last_turn(session))
        self._activity: asyncio.Future[None] | None = None
        self._idle_waiters: list[asyncio.Future[None]] = []  # `when_idle` callers, woken by `converge`
        self._driver: asyncio.Task[None] | None = None
        self._disposal: asyncio.Future[None] | None = None
        self._cleanups: list[Callable[[], None]] = []

    def __repr__(self) -> str:
        return f"<Agent {self.id} {self.status}>"

    # -- status ---------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def status(self) -> Literal["idle", "running"]:
        return "running" if isinstance(self._phase, Running) else "idle"

    @property
    def disposed(self) -> bool:
        return self._disposal is not None

    def _set_phase(self, phase: Phase) -> None:
        running = isinstance(phase, Running)  # `status` of the new phase, without the property calls
        was_running = isinstance(self._phase, Running)
        self._phase = phase
        if running != was_running:
            self.events.emit("agent/status", {"agent": self.id, "status": "running" if running else "idle"})

    def add_cleanup(self, fn: Callable[[], None]) -> None:
        """Scoped listeners registered by others; removed at dispose."""
        self._cleanups.append(fn)

    # -- sending (§6.2) -------------------------------------------------------------------
    def send(self, message: Message, target: Target, wake: bool) -> str:
        # Decided before the insert, so a cancel fired by an insert listener cannot reclassify it.
        phase = self._phase
        waking_after_abort = wake and not isinstance(phase, Idle) and phase.abort.signal.aborted
        resolved: Target = "next-turn" if waking_after_abort else target
        self.inbox.append(resolved, message)  # a failing durable append propagates; nothing wakes
        if wake:
            self._wake_driver(after_abort=waking_after_abort)
        return str(message["id"])

    def followup(self, message: Message) -> str:
        return self.send(message, "next-turn", True)

    def steer(self, message: Message) -> str:
        return self.send(message, "next-step", True)

    def inject(self, message: Message) -> str:
        return self.send(message, "next-step", False)

    def _wake_driver(self, after_abort: bool = False) -> None:
        phase = self._phase
        if not isinstance(phase, Idle):
            reason = phase.abort.signal.reason if phase.abort.signal.aborted else None
            disposed = reason is not None and reason.get("kind") == "disposed"
            # A live, non-aborted running driver claims queued work itself: it never latches.
            if not disposed and (isinstance(phase, Maintenance) or after_abort):
                phase.wake_requested = True
            return
        if self._disposal is not None:
            return
        # --- S1 begin: running status, turn/start and the first claim happen before send returns ---
        loop = asyncio.get_running_loop()
        self._activity = loop.create_future()
        self._set_phase(Running(abort=AbortController(), turn=phase.last_turn))
        opened: Any
        try:
            opened = open_turn(self)
        except BaseException as exc:  # the driver converges on it at once (§6.2)
            opened = exc
        # --- S1 end ---
        # `asyncio.create_task` is this call plus a frame and a `_set_task_name` (issue 13).
        self._driver = loop.create_task(drive(self, opened), name=f"driver:{self.id}")

    def resume_pending(self) -> bool:
        """Wake the driver for work a log rebuild restored into the inbox (a resumed session: no
        send woke it). Returns whether a turn was started or latched."""
        if not self.inbox.has_pending or self._disposal is not None:
            return False
        self._wake_driver()
        return True

    # -- cancel (§6.4, span S2) -----------------------------------------------------------
    def cancel(self, cause: CancelCause, *, keep_inbox: bool = False) -> None:
        # Sync span S2: clear inbox → drop latch → abort, so a reentrant send from a discard
        # listener still sees a non-aborted signal.
        if not keep_inbox:
            self.inbox.clear()
            if not isinstance(self._phase, Idle):
                self._phase.wake_requested = False
        if not isinstance(self._phase, Idle):
            self._phase.abort.abort(cause)

    # -- idle -----------------------------------------------------------------------------
    async def when_idle(self) -> None:
        """Return once no activity runs. Each caller waits on a future of its own that `converge`
        resolves directly: one loop hop, and a cancelled caller cancels only its own future (what
        the `shield` of the shared activity future was for, at one hop and a future more; issue 13)."""
        activity = self._activity
        while activity is not None and not activity.done():
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(waiter)
            await waiter
            activity = self._activity  # a wake may have opened a newer activity: wait for that one too

    def call_when_idle(self, fn: Callable[[], None]) -> None:
        """Call `fn()` when `when_idle` would return, from a callback instead of a task: the
        settlement watcher and the disposal wait for idleness once per child (issue 13). Now, if
        the agent never had an activity; else when the current one ends with no newer one begun."""
        activity = self._activity
        if activity is None:
            fn()
            return

        def check(_: asyncio.Future[None]) -> None:
            if self._activity is activity:
                fn()
            else:
                self.call_when_idle(fn)  # a wake opened a new activity: wait for that one too

        activity.add_done_callback(check)

    def converge(self, last_turn: int, wake_requested: bool) -> None:
        """End the current activity (a driver's or a maintenance task's `finally` calls this once).

        Invariant, in this order: the phase is `Idle` before anything else runs, so a listener or
        a replayed wake sees an idle agent; a latched wake is replayed only if input is still
        pending (it may open the next activity at once); the ended activity's future resolves
        last, so `when_idle` callers wake to the newest state and, if a wake opened a new
        activity, wait for that one too. Plain `def`: no await can split the three.
        """
        activity = self._activity
        self._set_phase(Idle(last_turn=last_turn))
        if wake_requested and self.inbox.has_pending:
            self._wake_driver()
        if activity is not None and not activity.done():
            activity.set_result(None)
        waiters, self._idle_waiters = self._idle_waiters, []
        for waiter in waiters:
            if not waiter.done():  # a cancelled `when_idle` left its own future behind
                waiter.set_result(None)
        self.events.emit("agent/converged", {"agent": self.id})

    # -- maintenance (§6.4) ---------------------------------------------------------------
    def run_maintenance(self, task: Callable[[AbortSignal], Awaitable[T]]) -> asyncio.Future[T]:
        if not isinstance(self._phase, Idle):
            raise AgentBusy(self.id)
        controller = AbortController()
        self._activity = asyncio.get_running_loop().create_future()
        self._set_phase(Maintenance(abort=controller, last_turn=self._phase.last_turn))
        result: asyncio.Future[T] = asyncio.get_running_loop().create_future()

        async def runner() -> None:
            try:
                value = await task(controller.signal)
            except BaseException as exc:
                if not result.done():
                    result.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                if not result.done():
                    result.set_result(value)
            finally:
                phase = self._phase
                assert isinstance(phase, Maintenance)
                self.converge(phase.last_turn, phase.wake_requested)
                self.events.emit("agent/maintenance-end", {"agent": self.id})

        asyncio.create_task(runner(), name=f"maintenance:{self.id}")
        return result

    # -- dispose (§6.4) -------------------------------------------------------------------
    def dispose(self, *, keep_inbox: bool = False) -> asyncio.Future[None]:
        """Memoized: every caller awaits the same future. `keep_inbox`: only this process lets the
        agent go, not the conversation (the Temporal turn activity: its queued work is the next
        turn's, rebuilt from the log), so pending work is not discarded.

        An agent already idle after the cancel (the disposal transaction's step 9 always is) is
        released now, in this call: cleanups, unregister, and a future that completes with the
        session's close; no task and no idle wait (issue 13). Otherwise a task waits for idle first.
        """
        if self._disposal is None:
            self.cancel({"kind": "disposed"}, keep_inbox=keep_inbox)
            activity = self._activity  # read after the cancel: a discard listener may have woken it
            if activity is None or activity.done():
                self._disposal = self._release()
            else:
                self._disposal = asyncio.ensure_future(self._dispose())
        return self._disposal

    async def _dispose(self) -> None:
        await self.when_idle()
        await self._release()

    def _release(self) -> asyncio.Future[None]:
        for fn in self._cleanups:
            try:
                fn()
            except Exception:
                logger.exception("cleanup of %s failed", self.id)
        self._cleanups.clear()
        if self.registry is not None:
            self.registry.unregister(self)
        closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.store.closing(self.session).add_done_callback(functools.partial(_settle_from, closed))
        return closed

    # -- pre-step checkpoint (§5.5) -------------------------------------------------------
    async def _checkpoint(self, ctx: PreStep) -> None:
        await self.store.flush(self.session)


def _settle_from(target: asyncio.Future[None], source: asyncio.Future[None]) -> None:
    """Complete `target` as `source` completed; a failure left unawaited is marked retrieved."""
    if target.done():
        return
    if source.cancelled():
        target.cancel()
    elif (exc := source.exception()) is not None:
        target.set_exception(exc)
        target.add_done_callback(lambda f: f.exception())
    else:
        target.set_result(None)


def _last_turn(session: Session) -> int:
    for event in reversed(session.events):
        if event["type"] == "turn/start":
            return int(event["data"]["turn"])
    return 0
