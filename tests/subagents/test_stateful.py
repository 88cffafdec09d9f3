"""Random interleavings with invariants (issue 14 item 4; SPEC §5–§11).

A hypothesis state machine drives one real tree (root `R`, continuable children `C1` and `C2`, and
`G` under `C1`) over a tmp home: the real `Tree` (store, registry, manager, tools), with the
`GateProvider` at the model seam, so every model request hangs until a rule releases it. Rules are
followups (manager and `send_message`), steers, injects, cancels (with and without `keep_inbox`),
interrupts (both authorities, refused ones included), reports (tool and direct; the delivery mode is
drawn per example), settlements (releasing a hang), cold resumes, drains, and a teardown drawn per
example. Refusals are checked against oracles written from §8.7, §10.2 and §11.2.

After every rule the loop runs until the runtime is quiescent (every live agent idle or hanging at
the seam, no open disposal, no materialization, no settled-but-resident Activation; see `_quiet`),
then the invariants read the flushed durable logs and the live state:
FIFO per inbox, no message claimed twice, no inserted message gone without a canceled splice,
exactly one settlement notice per announced epoch in the direct parent's log, no Activation settling
while it owns a child, and `validate_log` on every log.

`DSH_STATEFUL_PROFILE=long` (scripts/stateful.sh) runs 10,000 examples; CI runs 200, derandomized.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from dsh.loader.agent import Agent, Running
from dsh.loader.errors import SubagentError
from dsh.loader.subagents import (
    AncestorAuthority,
    UserAuthority,
    drain_children,
    drain_descendants,
    interrupt,
    report_from,
)
from dsh.loader.texts import render

from ._stateful_kit import reply_error, reply_text, reply_tools
from ._stateful_machine import CHILDREN, KEYS, PARENT_OF, TreeHarness, event

settings.register_profile(
    "dsh-ci", max_examples=200, stateful_step_count=20, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much], print_blob=True,
)
settings.register_profile(
    "dsh-long", parent=settings.get_profile("dsh-ci"), derandomize=False,
    max_examples=int(os.environ.get("DSH_STATEFUL_EXAMPLES", "10000")),
    stateful_step_count=int(os.environ.get("DSH_STATEFUL_STEPS", "30")),
)
PROFILE = "dsh-long" if os.environ.get("DSH_STATEFUL_PROFILE") == "long" else "dsh-ci"

pick = st.integers(0, 7)


class TreeMachine(TreeHarness):
    """The rules; the harness holds the tree, the quiescence wait and the invariants."""

    @precondition(lambda self: self._hanging())
    @rule(who=pick, to=st.sampled_from(KEYS),
          kind=st.sampled_from(["text", "text", "text", "report", "send", "interrupt", "error", "max-tokens"]))
    def release(self, who: int, kind: str, to: str) -> None:
        """Settlement and tool paths: a hanging request gets its reply."""
        keys = self._hanging()
        key = keys[who % len(keys)]
        if kind == "report" and key == "R":
            kind = "text"  # the root has no report tool (§8.1)
        replies = {
            "text": lambda: reply_text(f"{key} done"),
            "max-tokens": lambda: reply_text(f"{key} cut", "max-tokens"),
            "error": reply_error,
            "report": lambda: reply_tools((self.call_id(), "report", {"output": f"{key} progress"})),
            "send": lambda: reply_tools(
                (self.call_id(), "send_message", {"agent_id": self.ids[to], "message": f"from {key}"})),
            "interrupt": lambda: reply_tools((self.call_id(), "interrupt_agent", {"agent_id": self.ids[to]})),
        }
        reply = replies[kind]()
        event(f"release: {kind}")
        self.sync(lambda: self.tree.provider.release(key, reply))  # type: ignore[union-attr]

    @precondition(lambda self: self._hanging())
    @rule(who=pick)
    def settle(self, who: int) -> None:
        """A hanging request answered with plain text: the turn completes, and a child with nothing
        accepted or owned then settles (its watcher disposes it and the parent gets one notice)."""
        keys = self._hanging()
        key = keys[who % len(keys)]
        event("release: settle")
        self.sync(lambda: self.tree.provider.release(key, reply_text(f"{key} finished")))  # type: ignore[union-attr]

    # -- rules: the manager and the agents -------------------------------------------------------------
    def _expect_followup(self, parent: Agent, target: str) -> str | None:
        """§8.7 / §8.9: the error code a followup must raise, or None when it must be accepted."""
        m = self.tree.manager  # type: ignore[union-attr]
        if m.closing_for(parent) is not None:
            return "DRAINING"
        if m.registry.get(parent.id) is not parent or PARENT_OF.get(target) != self.key(parent):
            return "UNAUTHORIZED"
        return None

    def _followup(self, parent: Agent, target: str) -> None:
        m = self.tree.manager  # type: ignore[union-attr]
        expected = self._expect_followup(parent, target)

        async def op() -> Any:
            try:
                return await m.followup(parent, self.ids[target], f"work for {target}", {"kind": "user"}, self.signal())
            except SubagentError as exc:
                return exc

        cold = self.ids[target] not in m.activations
        result = self.run(op)
        event(f"followup: {expected or ('cold resume' if cold else 'accepted')}")
        if expected is None:
            assert isinstance(result, str), f"followup {self.key(parent)}->{target} refused: {result!r}"
            self.accepted[target].append(result)
        else:
            assert isinstance(result, SubagentError) and result.code == expected, (expected, result)

    @rule(to=st.sampled_from(CHILDREN), sender=st.sampled_from(["parent", "parent", "parent", "other", "stale"]),
          which=pick)
    def followup(self, to: str, sender: str, which: int) -> None:
        """manager.followup: from the live parent it lands in the live inbox or cold-resumes a settled
        child (a new epoch); from any other agent, or a handle of an earlier epoch, it is refused."""
        if sender == "parent":
            agent = self.live(PARENT_OF[to])
        elif sender == "other":
            agent = self.live([k for k in KEYS if k != PARENT_OF[to]][which % 3])
        else:  # prefer an old handle of the true parent: right id, wrong object (T-ERR-STALE)
            stale = [a for a in self._stale() if self.key(a) == PARENT_OF[to]] or self._stale()
            agent = stale[which % len(stale)] if stale else None
        if agent is not None:
            self._followup(agent, to)

    @rule(key=st.sampled_from(KEYS), how=st.sampled_from(["followup", "steer", "inject"]))
    def user_send(self, key: str, how: str) -> None:
        agent = self.live(key)
        if agent is None:
            return
        message = self.message(f"{how} to {key}")
        self.accepted[key].append(self.sync(lambda: getattr(agent, how)(message)))

    @rule(key=st.sampled_from(KEYS), keep_inbox=st.booleans())
    def cancel(self, key: str, keep_inbox: bool) -> None:
        agent = self.live(key)
        if agent is not None:
            self.sync(lambda: agent.cancel({"kind": "user"}, keep_inbox=keep_inbox))

    def _expect_interrupt(self, target: str, authority: Any) -> str | None:
        """§10.2, written from the durable headers and the registry, not from `ancestry`."""
        m = self.tree.manager  # type: ignore[union-attr]
        a = m.activations.get(self.ids[target])
        if isinstance(authority, AncestorAuthority):
            caller = authority.agent
            if m.registry.get(caller.id) is not caller:
                return "T-ERR-STALE"
            if caller.id == self.ids[target]:
                return "T-ERR-SELF"
            if a is None:
                return None
            chain, k = [], target
            while k in PARENT_OF:
                k = PARENT_OF[k]
                chain.append(k)
            return None if self.key(caller) in chain else "T-ERR-NOT-DESCENDANT"
        if a is None:
            return None
        return None if authority.parent_session_id == self.ids[PARENT_OF[target]] else "T-ERR-NOT-PARENT"

    @rule(to=st.sampled_from(CHILDREN), by=st.sampled_from(["user", "user-wrong", *KEYS, "stale"]), which=pick)
    def interrupt(self, to: str, by: str, which: int) -> None:
        target = to
        if by == "user":
            authority: Any = UserAuthority(self.ids[PARENT_OF[target]])
        elif by == "user-wrong":
            authority = UserAuthority(self.ids["C2" if PARENT_OF[target] != "C2" else "R"])
        elif by == "stale":
            stale = self._stale()
            if not stale:
                return
            authority = AncestorAuthority(stale[which % len(stale)])
        else:
            agent = self.live(by)
            if agent is None:
                return
            authority = AncestorAuthority(agent)
        expected = self._expect_interrupt(target, authority)
        agent = self.live(target)
        open_turn = agent.phase.turn if agent is not None and isinstance(agent.phase, Running) else None

        def op() -> Any:
            try:
                return interrupt(self.tree.manager, self.ids[target], authority)  # type: ignore[union-attr]
            except SubagentError as exc:
                return exc

        result = self.sync(op)
        event(f"interrupt: {expected or ('running' if open_turn else 'no turn')}")
        if expected is None:
            assert result is None, f"interrupt of {target} by {by} refused: {result!r}"
            if open_turn is not None:  # §10.3: the running turn ends aborted with the authority's cause
                cause = "user" if isinstance(authority, UserAuthority) else "parent"
                ends = [e["data"] for e in agent.session.events  # type: ignore[union-attr]
                        if e["type"] == "turn/end" and e["data"]["turn"] == open_turn]
                assert ends and ends[0]["reason"] == {"kind": "aborted", "reason": {"kind": cause}}, ends
        else:
            assert isinstance(result, SubagentError) and result.code == "UNAUTHORIZED", (expected, result)
            caller = getattr(authority, "agent", None)
            text = render(expected, aid=caller.id if caller is not None else "", id=self.ids[target])
            assert result.message == text, (expected, result.message)

    @rule(key=st.sampled_from(CHILDREN))
    def report_direct(self, key: str) -> None:
        """report_from outside a turn (§11.2): accepted while resident, refused once closing."""
        m = self.tree.manager  # type: ignore[union-attr]
        child = self.live(key)
        if child is None:
            return
        a = m.activations.get(child.id)
        expected = ("DRAINING" if m.closing_for(child) is not None
                    else "UNAUTHORIZED" if a is None or a.agent is not child
                    else "PARENT_UNAVAILABLE" if self.live(PARENT_OF[key]) is None else None)

        def op() -> Any:
            try:
                return report_from(m, child, f"direct report of {key}", self.signal())
            except SubagentError as exc:
                return exc

        result = self.sync(op)
        if expected is None:
            assert isinstance(result, str), result
            self.accepted[PARENT_OF[key]].append(result)
        else:
            assert isinstance(result, SubagentError) and result.code == expected, (expected, result)

    @rule(parent=st.sampled_from(["R", "C1"]), ids=st.sets(st.sampled_from(KEYS), max_size=3))
    def drain_some(self, parent: str, ids: set[str]) -> None:
        """drain_children (§8.12): only the caller's own children; any other id refuses the lot."""
        agent = self.live(parent)
        if agent is None:
            return
        m = self.tree.manager  # type: ignore[union-attr]
        wanted = [self.ids[k] for k in sorted(ids)]
        foreign = [k for k in sorted(ids) if self.ids[k] in m.activations and PARENT_OF.get(k) != parent]

        async def op() -> Any:
            try:
                await drain_children(m, agent, wanted)
            except SubagentError as exc:
                return exc
            return None

        result = self.run(self.forced(op))
        if foreign:
            assert isinstance(result, SubagentError) and result.code == "UNAUTHORIZED", (foreign, result)
        else:
            assert result is None, result

    @rule(what=st.sampled_from(["scope", "root"]), gate=st.integers(0, 9))
    def close(self, what: str, gate: int) -> None:
        """Rare and final: drain_descendants([R]) closes the root's scope; or the root is disposed
        while children still run (their notices then meet a parent that is not live, §9.5)."""
        if gate != 0 or self.closed_scope or self.root_gone:
            return
        root = self.live("R")
        assert root is not None
        if what == "scope":
            self.closed_scope = True
            self.run(self.forced(lambda: drain_descendants(self.tree.manager, [root])))  # type: ignore[union-attr]
        else:
            self.root_gone = True
            self.run(self.forced(lambda: root.dispose()))


TreeMachine.TestCase.settings = settings.get_profile(PROFILE)
TestTreeInterleavings = TreeMachine.TestCase


def play(steps: list[Any], *, delivery: str = "wakeup", teardown: str = "shutdown") -> TreeMachine:
    """Run one fixed rule sequence with every invariant checked after each step and at teardown."""
    machine = TreeMachine()
    try:
        machine.build_tree(delivery=delivery, teardown=teardown)
        machine.check_all()
        for step in steps:
            step(machine)
            machine.check_all()
    finally:
        machine.teardown()
    return machine


def settle(key: str) -> Any:
    return lambda m: m.settle(who=m.hanging_index(key))


def test_unannounced_epoch_under_a_live_parent_sends_no_notice() -> None:
    """§9.2 step 1, §8.9: an old handle of C1 (right id, wrong object) cold-resumes G; S4 refuses it as
    stale after the materialization, so G's second epoch ends unannounced while the live C1 (second
    epoch) would receive a notice if the `announced` guard were missing."""
    machine = play([
        settle("G"),  # G settles; its notice is steered into C1's running turn
        settle("C1"), settle("C1"),  # C1 reads it and settles; its notice goes to R
        lambda m: m.followup(to="C1", sender="parent", which=0),  # cold resume: C1's second epoch
        lambda m: m.followup(to="G", sender="stale", which=0),  # the epoch-1 C1 handle: refused
    ])
    g = [(e.epoch, e.announced, e.parent_live) for e in machine.epochs if e.key == "G"]
    assert g[:2] == [(1, True, True), (2, False, True)], g


def test_notice_to_a_root_that_is_gone_is_kept_in_its_session() -> None:
    """§26 item 3 (issue 9): the root is disposed while C2 still works; C2 then settles and its
    notice finds no live parent, so it is written into the root's session for its next residency
    (the invariant `one_notice_per_announced_epoch` requires it, NOTICE_KEPT_FOR_ABSENT_PARENT). A
    user interrupt still reaches C1 by the durable parent address (§10.1)."""
    machine = play([
        lambda m: m.close(what="root", gate=0),
        settle("C2"),
        lambda m: m.interrupt(to="C1", by="user", which=0),
    ], teardown="root-first")
    c2 = [e for e in machine.epochs if e.key == "C2"][0]
    assert (c2.stop_reason, c2.announced, c2.parent_live) == ("completed", True, False)
    c1 = [e for e in machine.epochs if e.key == "C1"][0]
    assert c1.stop_reason == "aborted"
