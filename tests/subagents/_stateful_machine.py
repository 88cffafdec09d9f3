"""The harness of the stateful interleaving test (`test_stateful.py`): one real tree per example on
its own event loop, the quiescence wait, the lifecycle records and the invariants.

The tree is the runner's own `Tree` (store, registry, continuation manager, real tools) over a tmp
home, with `GateProvider` at the model seam. `TreeHarness` holds no rules; `TreeMachine` in the test
module adds them. Invariants read the flushed durable logs (`snapshot`) and the live state.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import event as _event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant

from dsh.loader.abort import AbortController
from dsh.loader.agent import Agent, AgentOptions, Idle, Running, user_message
from dsh.loader.session import validate_log
from dsh.loader.session.repair import parse, read_raw
from dsh.loader.subagents import ManagerConfig, drain, drain_descendants, state_of
from dsh.loader.tree import Tree

from ._stateful_kit import GateProvider, InlineExecutor, Ledger, ledger, reply_tools

__all__ = ["CHILDREN", "KEYS", "NOTICE_KEPT_FOR_ABSENT_PARENT", "PARENT_OF", "Epoch", "TreeHarness", "event"]

KEYS = ("R", "C1", "C2", "G")
CHILDREN = ("C1", "C2", "G")
PARENT_OF = {"C1": "R", "C2": "R", "G": "C1"}
# Loop ticks a rule may take to reach quiescence: a loud backstop, never a sequencing device.
MAX_TICKS = 20_000
# SPEC §9.5 today: a notice to a parent that is not live when its child settles is dropped (the
# child's session is the record). SPEC §26 item 3 changes this to "kept durably and delivered at the
# parent's next residency"; when that lands, set this to True and every announced epoch needs one.
NOTICE_KEPT_FOR_ABSENT_PARENT = True

PROGRESS = os.environ.get("DSH_STATEFUL_PROGRESS")


def event(value: str) -> None:
    """Statistics for `--hypothesis-show-statistics`; a no-op in the fixed-sequence tests."""
    if currently_in_test_context():
        _event(value)


@dataclass
class Epoch:
    """One residency of a child as the lifecycle edges and the Activation record saw it."""

    key: str
    epoch: int
    announced: bool
    stop_reason: str
    parent_live: bool  # the direct parent was registered when the notice was due (span S6)
    owned_left: list[str]  # owned children still resident at settlement: must be empty
    owning_at_open: list[str]  # resident owned children when its disposal opened
    forced: bool  # the disposal opened during a drain, a root disposal or teardown
    children_left: list[str]  # Activations naming this child as parent at settlement: must be empty


class ErrorLog(logging.Handler):
    """Collects runtime warnings and errors: a crashed watcher or a failed notice is a finding."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}")


def _outcome(exc: BaseException | None) -> str:
    """`.` passed, `F` failed (an invariant or an oracle), `x` discarded by hypothesis itself.
    Hypothesis calls `teardown` from a `finally`, so the example's exception is still in flight."""
    if exc is None:
        return "."
    return "x" if type(exc).__module__.startswith("hypothesis") else "F"


class TreeHarness(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.loop.set_default_executor(InlineExecutor())
        self.home = Path(tempfile.mkdtemp(prefix="dsh-stateful-"))
        self.errors = ErrorLog()
        logging.getLogger("dsh.loader").addHandler(self.errors)
        self.tree: Tree | None = None
        self.ids: dict[str, str] = {}
        self.built: dict[str, list[Agent]] = {k: [] for k in KEYS}
        self.open: dict[str, Any] = {}  # child id -> its resident Activation (from subagent/start)
        self.epochs: list[Epoch] = []
        self.accepted: dict[str, list[str]] = {k: [] for k in KEYS}  # ids a send returned, per target
        self.serial = 0
        self.steps = 0
        self.snap: tuple[int, dict[str, list[dict[str, Any]]], dict[str, Ledger]] | None = None
        # Per key: the log's bytes at the last read, its events and ledger, and whether `validate_log`
        # passed them. All three are pure functions of the bytes, so a log no rule appended to since
        # is not parsed, folded or validated again (most steps touch one or two of the four logs).
        self.parsed: dict[str, tuple[bytes, list[dict[str, Any]], Ledger]] = {}
        self.validated: dict[str, bytes] = {}
        self.teardown_mode = "shutdown"
        self.closed_scope = False
        self.root_gone = False
        self.forcing = False  # a drain or the root's disposal is in progress
        self.opened: dict[int, tuple[list[str], bool]] = {}  # id(Activation) -> (owning, forced)

    # -- running the loop ------------------------------------------------------------------------
    def run(self, op: Any) -> Any:
        """Run `op()` (a coroutine function) to completion, then until the runtime is quiescent."""

        async def body() -> Any:
            task = asyncio.ensure_future(op())
            # Each tick lets already-scheduled callbacks (drivers, watchers, store writes that the
            # inline executor completed) run; `_quiet` is the fact we wait for.
            for _ in range(MAX_TICKS):
                if task.done() and self._quiet():
                    return task.result()
                await asyncio.sleep(0)
            raise AssertionError(f"no quiescence after {MAX_TICKS} ticks: {self._describe()}")

        self.steps += 1
        return self.loop.run_until_complete(body())

    def sync(self, fn: Any) -> Any:
        async def op() -> Any:
            return fn()

        return self.run(op)

    def _quiet(self) -> bool:
        t = self.tree
        assert t is not None
        if t.manager.materializations or t.manager.offline_deliveries:  # offline notices land first
            return False
        for agent in list(t.registry):
            if isinstance(agent.phase, Running):
                call = t.provider.waiting(self.key(agent))  # type: ignore[attr-defined]
                if call is None or call.session_id != agent.id:
                    return False
            elif not isinstance(agent.phase, Idle):  # maintenance
                return False
        for a in t.manager.activations.values():
            if a.disposal is not None or not a.resident or state_of(a) == "settled":
                return False
        return True

    def _describe(self) -> str:
        t = self.tree
        assert t is not None
        agents = {self.key(a): type(a.phase).__name__ for a in t.registry}
        acts = {self.key(a.agent): (state_of(a), a.disposal is not None) for a in t.manager.activations.values()}
        return f"agents={agents} activations={acts} materializing={len(t.manager.materializations)}"

    # -- naming ----------------------------------------------------------------------------------
    def key(self, agent: Agent) -> str:
        return next((k for k, i in self.ids.items() if i == agent.id), "?")

    def live(self, key: str) -> Agent | None:
        assert self.tree is not None
        return self.tree.registry.get(self.ids[key]) if key in self.ids else None

    def message(self, text: str) -> dict[str, Any]:
        self.serial += 1
        return user_message(f"{text} #{self.serial}", {"kind": "user"}, id=f"m-{self.serial}")

    def call_id(self) -> str:
        self.serial += 1
        return f"t-{self.serial}"

    @staticmethod
    def signal() -> Any:
        return AbortController().signal

    # -- setup -----------------------------------------------------------------------------------
    @initialize(delivery=st.sampled_from(["wakeup", "quiet"]),
                teardown=st.sampled_from(["shutdown", "drain-first", "root-first"]))
    def build_tree(self, delivery: str, teardown: str) -> None:
        self.teardown_mode = teardown
        provider = GateProvider()
        self.tree = tree = Tree(
            home=self.home, provider=provider, options=AgentOptions(),
            manager_config=ManagerConfig(report_delivery=delivery),  # type: ignore[arg-type]
            batch_delay_ms=0,
        )
        tree.agent_hooks.append(self._built)
        tree.manager.events.on("subagent/start", self._on_start)
        tree.manager.events.on("subagent/end", self._on_end)
        tree.manager.events.on("changed", self._on_changed)

        async def grow() -> Agent:
            root = await tree.create_root("session-stateful-root")
            self.ids["R"] = root.id
            root.followup(self.message("grow the tree"))
            return root

        self.run(grow)
        self.sync(lambda: provider.release("R", reply_tools(
            ("spawn-C1", "subagent", {"label": "c1", "prompt": "first child"}),
            ("spawn-C2", "subagent", {"label": "c2", "prompt": "second child"}),
        )))
        self.sync(lambda: provider.release("C1", reply_tools(
            ("spawn-G", "subagent", {"label": "g", "prompt": "grandchild"}),
        )))
        assert set(self.ids) == set(KEYS), self.ids
        assert all(provider.waiting(k) for k in KEYS), self._describe()

    def _built(self, agent: Agent) -> None:
        key = self.tree.provider.keys.get(agent.id)  # type: ignore[union-attr]
        if key is not None:
            self.ids.setdefault(key, agent.id)
            self.built[key].append(agent)

    def _on_start(self, edge: dict[str, Any]) -> None:
        assert self.tree is not None
        self.open[edge["sessionId"]] = self.tree.manager.activations[edge["sessionId"]]

    def _on_changed(self, _payload: Any) -> None:
        # `dispose` pulses right after span S5, so a new open disposal is seen here with the owned
        # children it had when the watcher (or a drain) decided to end it.
        m = self.tree.manager  # type: ignore[union-attr]
        for a in m.activations.values():
            if a.disposal is not None and id(a) not in self.opened:
                self.opened[id(a)] = ([c for c in a.owned_children if c in m.activations], self.forcing)

    def forced(self, op: Any) -> Any:
        async def wrapped() -> Any:
            self.forcing = True
            try:
                return await op()
            finally:
                self.forcing = False

        return wrapped

    def _on_end(self, edge: dict[str, Any]) -> None:
        # Emitted right after span S6 (§8.11 step 14) with no await in between, so the registry and
        # the Activation map read here are what the notice saw.
        m = self.tree.manager  # type: ignore[union-attr]
        a = self.open.pop(edge["sessionId"])
        assert a.epoch == edge["epoch"]
        owning, forced = self.opened.pop(id(a), (["<disposal never seen opening>"], False))
        self.epochs.append(Epoch(
            owning_at_open=owning, forced=forced,
            key=self.key(a.agent), epoch=a.epoch, announced=a.announced, stop_reason=edge["stopReason"],
            parent_live=m.registry.get(a.parent_session) is not None,
            owned_left=[c for c in a.owned_children if c in m.activations],
            children_left=[b.child_id for b in m.activations.values() if b.parent_session == a.child_id],
        ))

    def _hanging(self) -> list[str]:
        provider: Any = self.tree.provider if self.tree is not None else None
        return [k for k in KEYS if provider is not None and provider.waiting(k)]

    def _stale(self) -> list[Agent]:
        return [a for k in KEYS for a in self.built[k] if self.live(k) is not a]

    # -- invariants --------------------------------------------------------------------------------
    def snapshot(self) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Ledger]]:
        """Flushed durable logs and their ledgers, read once per step."""
        if self.snap is None or self.snap[0] != self.steps:
            t = self.tree
            assert t is not None

            async def flush() -> None:
                for agent in list(t.registry):
                    await t.store.flush(agent.session)

            self.loop.run_until_complete(flush())
            for k, i in self.ids.items():
                raw = read_raw(t.store.path(i))
                seen = self.parsed.get(k)
                if seen is None or seen[0] != raw:  # `read`, on the bytes just read
                    events = parse(raw, source=str(t.store.path(i))).events
                    self.parsed[k] = (raw, events, ledger(events))
            logs = {k: self.parsed[k][1] for k in self.ids}
            self.snap = (self.steps, logs, {k: self.parsed[k][2] for k in self.ids})
        return self.snap[1], self.snap[2]

    @invariant()
    def logs_valid_and_mirrored(self) -> None:
        logs, _ = self.snapshot()
        for key, events in logs.items():
            raw = self.parsed[key][0]
            if self.validated.get(key) is not raw:  # the same bytes passed before: same verdict
                validate_log(events)
                self.validated[key] = raw
            agent = self.live(key)
            if agent is not None:
                assert list(agent.session.events) == events, f"{key}: durable log differs from memory"
        assert self.tree is not None and self.tree.provider.problems == []  # type: ignore[attr-defined]
        assert self.errors.records == []

    @invariant()
    def fifo_and_claimed_once(self) -> None:
        _, leds = self.snapshot()
        for key, led in leds.items():
            assert led.problems == [], (key, led.problems)
            twice = {i: n for i, n in {**led.claimed, **led.entered}.items() if n > 1}
            assert not twice, (key, twice)
            agent = self.live(key)
            if agent is not None:  # the live queues are the log's queues, in order
                live = {t: [m["id"] for m in ms] for t, ms in agent.inbox.lists.items()}
                assert live == led.pending, (key, live, led.pending)

    @invariant()
    def nothing_lost(self) -> None:
        _, leds = self.snapshot()
        for key, led in leds.items():
            lost = led.lost()
            context = [u for u in led.unentered if u[0] in lost]
            assert not lost, f"{key}: {lost} left the inbox unrun without a canceled splice {context}"
            missing = [i for i in self.accepted[key] if i not in led.inserted]
            assert not missing, (key, missing)
        m = self.tree.manager  # type: ignore[union-attr]
        for a in m.activations.values():
            pending = {i for ms in a.agent.inbox.lists.values() for i in (x["id"] for x in ms)}
            assert a.accepted <= pending, (self.key(a.agent), a.accepted - pending)

    @invariant()
    def one_notice_per_announced_epoch(self) -> None:
        _, leds = self.snapshot()
        sent = {k: [] for k in CHILDREN}  # type: dict[str, list[tuple[str, str]]]
        for key, led in leds.items():
            for _, msg in led.inserts:
                src = msg["source"]
                if src["kind"] == "subagent-settled":
                    sender = next(k for k, i in self.ids.items() if i == src["senderSessionId"])
                    sent[sender].append((key, src["stopReason"]))
        for child in CHILDREN:
            due = [e for e in self.epochs if e.key == child and e.announced
                   and (e.parent_live or NOTICE_KEPT_FOR_ABSENT_PARENT)]
            assert sent[child] == [(PARENT_OF[child], e.stop_reason) for e in due], (child, sent[child], due)

    @invariant()
    def no_settlement_while_owning(self) -> None:
        for e in self.epochs:
            assert e.owned_left == [] and e.children_left == [], e
            # Only the watcher ends an epoch unforced, and only once it owns no resident child (S7).
            assert e.forced or e.owning_at_open == [], e
        m = self.tree.manager  # type: ignore[union-attr]
        for a in m.activations.values():  # ownership mirrors residency (§8.3, §8.9)
            assert all(c in m.activations for c in a.owned_children), self._describe()
            owner = m.activations.get(a.parent_session)
            if owner is not None:
                assert a.child_id in owner.owned_children, self._describe()

    # -- teardown ----------------------------------------------------------------------------------
    def teardown(self) -> None:
        try:
            if self.tree is not None:
                self._teardown()
        finally:
            logging.getLogger("dsh.loader").removeHandler(self.errors)
            self._abandon()
            shutil.rmtree(self.home, ignore_errors=True)
            if PROGRESS:  # one byte per finished example, so a long run can be watched
                with open(PROGRESS, "a") as f:
                    f.write(_outcome(sys.exc_info()[1]))

    def _abandon(self) -> None:
        """After a failure mid-tree: stop what still runs, unlock the sessions, close the loop."""
        async def stop() -> None:
            tasks = asyncio.all_tasks() - {asyncio.current_task()}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.loop.run_until_complete(stop())
        if self.tree is not None:
            self.loop.run_until_complete(self.tree.close_sessions())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def _teardown(self) -> None:
        t = self.tree
        assert t is not None
        root = self.live("R")
        phases: list[Any]
        if root is None:
            phases = [lambda: drain(t.manager)]
        elif self.teardown_mode == "shutdown":  # Tree.shutdown's order
            phases = [lambda: drain_descendants(t.manager, [root]), root.dispose, lambda: drain(t.manager)]
        elif self.teardown_mode == "drain-first":
            phases = [lambda: drain(t.manager), root.dispose]
        else:
            phases = [root.dispose, lambda: drain(t.manager)]
        for phase in phases:
            self.run(self.forced(phase))
            for check in (self.logs_valid_and_mirrored, self.fifo_and_claimed_once, self.nothing_lost,
                          self.one_notice_per_announced_epoch, self.no_settlement_while_owning):
                check()
        assert not t.manager.activations and len(t.registry) == 0, self._describe()
        event(f"epochs per example: {min(len(self.epochs) // 3 * 3, 12)}+")
        for e in self.epochs:
            event(f"epoch end: {e.key} {e.stop_reason}{'' if e.announced else ' unannounced'}"
                  f"{'' if e.parent_live else ' parent gone'}")
        assert not t.provider.calls  # type: ignore[attr-defined]


    # -- fixed sequences (regression examples) --------------------------------------------------------
    def check_all(self) -> None:
        for check in (self.logs_valid_and_mirrored, self.fifo_and_claimed_once, self.nothing_lost,
                      self.one_notice_per_announced_epoch, self.no_settlement_while_owning):
            check()

    def hanging_index(self, key: str) -> int:
        return self._hanging().index(key)
