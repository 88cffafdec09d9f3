"""Interrupt (SPEC §10, matrix 68–76): a fire-and-return stop of a resident child's current turn.

`interrupt` authorizes, issues `cancel(cause, keep_inbox=True)` and returns (span S8). It disposes,
releases, cascades and clears nothing: unclaimed queued work stays parked until a waking send, and
descendants keep running. Children are `RecordingAgent`s, so every cancel an agent receives is
visible; turns are parked on hangs and pre-step holds, never on sleeps.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from dsh.loader.agent import Agent, user_message
from dsh.loader.errors import SubagentError
from dsh.loader.ids import new_child_id
from dsh.loader.session import make_header
from dsh.loader.subagents import (
    AncestorAuthority,
    UserAuthority,
    drain_descendants,
    interrupt,
    list_agents,
    state_of,
)
from dsh.loader.texts import render
from tree_kit import (
    build,
    fresh_signal,
    HANG,
    RecordingAgent,
    TreeWatch,
    calls,
    first_texts,
    maintenance_until,
    reach,
    source_kinds,
    spawn,
    text,
    texts,
    turn_ends,
    entered,
)

USER = {"kind": "user"}
PARENT = {"kind": "parent"}


def aborted(cause: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "aborted", "reason": cause}


COMPLETED = {"kind": "completed"}


async def test_interrupted_child_parks_its_queue_until_the_next_followup(make_tree):
    """Matrix 68: one `(user, keep_inbox)` cancel; the same agent parks idle with B and C queued and
    no second request; a followup D then runs B, C, D in order and one notice follows."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [HANG, text("b"), text("c"), text("d")]},
    })
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    child = watch.agents["child"]
    cid = child.id
    for body in ("B", "C"):
        await tree.manager.followup(root, cid, body, USER, fresh_signal())

    assert interrupt(tree.manager, cid, UserAuthority(root.id)) is None
    assert child.cancels == [(USER, True)]
    await reach(child.when_idle())

    a = tree.manager.activations[cid]
    assert a.agent is child and child.status == "idle"
    assert a.parked and state_of(a) == "running"
    assert list_agents(tree.manager, tree.catalogue, root.id) == [{"id": cid, "label": "sa", "status": "parked"}]
    assert [texts(m)[0] for m in child.inbox.next_turn] == ["B", "C"]
    assert len(watch.requests_of("child")) == 1
    assert not any(m["source"]["kind"] == "subagent-settled" for m in entered(root))

    await tree.manager.followup(root, cid, "D", USER, fresh_signal())
    await tree.wait_quiet(root)
    assert first_texts(child) == ["task of sa", "B", "C", "D"]
    assert turn_ends(child) == [aborted(USER), COMPLETED, COMPLETED, COMPLETED]
    assert child.cancels[0] == (USER, True) and all(not keep for _, keep in child.cancels[1:])
    notices = [m for m in entered(root) if m["source"]["kind"] == "subagent-settled"]
    assert [n["source"]["stopReason"] for n in notices] == ["completed"]


async def test_interrupting_a_child_leaves_its_running_grandchild_alone(make_tree):
    """Matrix 69: only the child is cancelled; it stays resident and `waiting` while the grandchild
    runs, and the grandchild's notice then opens a child turn."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), HANG, text("child saw it")]},
        "grand": {"spawnedBy": "sb", "replies": [text("grand answer")]},
    })
    held = watch.hold("grand")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.hang("child"))
    child, grand = watch.agents["child"], watch.agents["grand"]

    interrupt(tree.manager, child.id, AncestorAuthority(root))
    await reach(child.when_idle())
    a = tree.manager.activations[child.id]
    assert child.cancels == [(PARENT, True)] and grand.cancels == []
    assert a.agent is child and state_of(a) == "waiting" and a.owned_children == {grand.id}
    assert grand.status == "running"

    held.release()
    await tree.wait_quiet(root)
    assert turn_ends(grand) == [COMPLETED]
    assert turn_ends(child) == [aborted(PARENT), COMPLETED]
    woke = entered(child)[-1]
    assert woke["source"]["kind"] == "subagent-settled" and woke["source"]["senderSessionId"] == grand.id


@pytest.mark.parametrize(
    ("parent_of", "expect_cancel"),
    [pytest.param("stranger", False, id="m70-wrong-parent"), pytest.param("root", True, id="m70-right-parent")],
)
async def test_user_authority_must_name_the_direct_parent(make_tree, parent_of, expect_cancel):
    """Matrix 70: a wrong parent address is `UNAUTHORIZED` and cancels nothing; the right one
    cancels with `(user, keep_inbox)`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "child": {"spawnedBy": "sa", "replies": [HANG]},
    })
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    child = watch.agents["child"]
    address = root.id if parent_of == "root" else f"session-{new_child_id()}"
    if expect_cancel:
        interrupt(tree.manager, child.id, UserAuthority(address))
        assert child.cancels == [(USER, True)]
        await reach(child.when_idle())
        assert turn_ends(child) == [aborted(USER)]
    else:
        with pytest.raises(SubagentError) as info:
            interrupt(tree.manager, child.id, UserAuthority(address))
        assert info.value.code == "UNAUTHORIZED"
        assert info.value.message == render("T-ERR-NOT-PARENT", id=child.id)
        assert child.cancels == [] and child.status == "running"


async def test_an_ancestor_interrupts_child_and_grandchild_with_cause_parent(make_tree):
    """Matrix 71: the root (a deeper ancestor for the grandchild) cancels both with
    `(parent, keep_inbox)`; both turns end `aborted/parent`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), HANG, text("ok")]},
        "grand": {"spawnedBy": "sb", "replies": [HANG]},
    })
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    await reach(watch.hang("grand"))
    child, grand = watch.agents["child"], watch.agents["grand"]

    interrupt(tree.manager, grand.id, AncestorAuthority(root))
    interrupt(tree.manager, child.id, AncestorAuthority(root))
    assert grand.cancels == [(PARENT, True)]
    assert child.cancels == [(PARENT, True)]
    await reach(grand.when_idle())
    assert turn_ends(grand)[0] == aborted(PARENT)
    await tree.wait_quiet(root)
    assert turn_ends(child)[0] == aborted(PARENT)


@pytest.mark.parametrize(
    ("caller", "target_absent", "code", "tid"),
    [
        pytest.param("target", False, "UNAUTHORIZED", "T-ERR-SELF", id="m72-self"),
        pytest.param("sibling", False, "UNAUTHORIZED", "T-ERR-NOT-DESCENDANT", id="m72-sibling"),
        pytest.param("stranger", False, "UNAUTHORIZED", "T-ERR-NOT-DESCENDANT", id="m72-stranger"),
        pytest.param("stale", False, "UNAUTHORIZED", "T-ERR-STALE", id="m72-stale"),
        pytest.param("stale", True, "UNAUTHORIZED", "T-ERR-STALE", id="m72-stale-absent-target"),
    ],
)
async def test_ancestor_authority_refuses_self_siblings_strangers_and_stale_objects(
    make_tree, caller, target_absent, code, tid
):
    """Matrix 72: SELF / NOT_DESCENDANT / NOT_DESCENDANT / STALE (checked before the target lookup,
    so an absent target is refused too); the target is never cancelled."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa", label="target"), spawn("sb", label="sibling")), text("STARTED")]},
        "target": {"spawnedBy": "sa", "replies": [HANG]},
        "sibling": {"spawnedBy": "sb", "replies": [HANG]},
    })
    root.followup(user_message("go"))
    await reach(watch.hang("target"))
    await reach(watch.hang("sibling"))
    target = watch.agents["target"]
    if caller == "target":
        agent: Agent = target
    elif caller == "sibling":
        agent = watch.agents["sibling"]
    elif caller == "stranger":
        session = await tree.store.create(make_header(f"session-{new_child_id()}"))
        agent = tree.make_agent(session, "root")
        tree.registry.register(agent)
        tree.roots.append(agent)
    else:  # a second object for the root's id, which the registry does not hold
        agent = RecordingAgent(root.session, store=tree.store, provider=tree.provider, registry=tree.registry)
    target_id = new_child_id() if target_absent else target.id

    with pytest.raises(SubagentError) as info:
        interrupt(tree.manager, target_id, AncestorAuthority(agent))
    assert info.value.code == code
    assert info.value.message == render(tid, aid=agent.id, id=target_id)
    assert target.cancels == [] and target.status == "running"


async def _one_shot_tree(make_tree: Any) -> tuple[Any, TreeWatch, Agent]:
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("so", run_in_background=False)), text("DONE")]},
        "once": {"spawnedBy": "so", "replies": [text("one-shot answer")]},
    })
    return tree, watch, root


@pytest.mark.parametrize(
    ("kind", "authority"),
    [
        pytest.param(kind, authority, id=f"m73-{kind}-{authority}")
        for kind in ("unknown", "one-shot", "settled")
        for authority in ("user", "ancestor")
    ],
)
async def test_unknown_one_shot_and_settled_targets_are_accepted_no_ops(make_tree, home, kind, authority):
    """Matrix 73: both authorities return quietly; a live one-shot child is never cancelled and no
    session file changes."""
    if kind == "one-shot":
        tree, watch, root = await _one_shot_tree(make_tree)
        held = watch.hold("once")
        root.followup(user_message("go"))
        await reach(held.reached)
        target = watch.agents["once"]
        target_id = target.id
    else:
        tree, watch, root = await build(make_tree, {
            "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
            "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
        })
        root.followup(user_message("go"))
        await tree.wait_quiet(root)
        target = watch.agents["child"]
        target_id = target.id if kind == "settled" else new_child_id()
    files_before = {p: p.read_bytes() for p in (home / "sessions").glob("*/session.jsonl")}
    cancels_before = list(getattr(target, "cancels", []))

    auth = UserAuthority(root.id) if authority == "user" else AncestorAuthority(root)
    assert interrupt(tree.manager, target_id, auth) is None

    assert target.cancels == cancels_before
    if kind == "one-shot":
        assert target.status == "running" and target_id not in tree.manager.activations
        held.release()
        await tree.wait_quiet(root)
        assert turn_ends(target) == [COMPLETED]
    else:
        assert {p: p.read_bytes() for p in (home / "sessions").glob("*/session.jsonl")} == files_before
        assert target_id not in tree.manager.activations


@pytest.mark.parametrize("authority", [pytest.param("user", id="m73-materializing-user"),
                                       pytest.param("ancestor", id="m73-materializing-ancestor")])
async def test_a_target_still_materializing_is_an_accepted_no_op(make_tree, authority):
    """Matrix 73: a target still materializing (§10.2) — an Activation that is installed but not yet resident is not cancelled."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
    })
    tried: list[str] = []

    def on_changed(_payload: Any) -> None:
        for a in list(tree.manager.activations.values()):
            if not a.resident and a.child_id not in tried:
                tried.append(a.child_id)
                auth = UserAuthority(root.id) if authority == "user" else AncestorAuthority(root)
                interrupt(tree.manager, a.child_id, auth)

    tree.manager.events.on("changed", on_changed)
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    child = watch.agents["child"]
    assert tried == [child.id]
    assert child.cancels[:1] == [(PARENT, False)]  # only the settlement's own disposal
    assert all(not keep for _, keep in child.cancels)
    assert turn_ends(child) == [COMPLETED]


@pytest.mark.parametrize("authority", [pytest.param("user", id="m74-user"), pytest.param("ancestor", id="m74-ancestor")])
async def test_interrupt_during_an_open_disposal_issues_no_second_cancel(make_tree, authority):
    """Matrix 74: once a scoped drain has opened the child's disposal, interrupt is a no-op."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "child": {"spawnedBy": "sa", "replies": [HANG]},
    })
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    await reach(root.when_idle())
    child = watch.agents["child"]
    a = tree.manager.activations[child.id]

    opened = asyncio.Event()
    tree.manager.events.on("changed", lambda _p: opened.set() if a.disposal is not None else None)
    drain = asyncio.ensure_future(drain_descendants(tree.manager, [root]))
    await reach(opened)
    assert child.cancels == [(PARENT, False)]

    auth = UserAuthority(root.id) if authority == "user" else AncestorAuthority(root)
    interrupt(tree.manager, child.id, auth)
    assert child.cancels == [(PARENT, False)]
    await reach(drain)
    assert all(not keep for _, keep in child.cancels)
    assert turn_ends(child) == [aborted(PARENT)]


async def test_a_waking_send_during_interrupt_convergence_latches_and_resumes_fifo(make_tree):
    """Matrix 75: while the interrupted turn is still converging, followup D is forced into
    next-turn and latches; at convergence B then D run, with no further input."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [text("b"), text("d")]},
    })
    # A slow pre-step listener that ignores the abort keeps the interrupted turn converging.
    held = watch.hold("child", respect_abort=False)
    try:
        await _latch_during_convergence(tree, watch, root, held)
    finally:
        held.release()  # never leave teardown waiting on a hold that ignores the abort


async def _latch_during_convergence(tree: Any, watch: TreeWatch, root: Agent, held: Any) -> None:
    root.followup(user_message("go"))
    await reach(held.reached)
    child = watch.agents["child"]
    await tree.manager.followup(root, child.id, "B", USER, fresh_signal())

    interrupt(tree.manager, child.id, UserAuthority(root.id))
    assert child.status == "running"
    await tree.manager.followup(root, child.id, "D", USER, fresh_signal())
    assert child.status == "running" and child.phase.wake_requested is True
    assert [texts(m)[0] for m in child.inbox.next_turn] == ["B", "D"]
    assert watch.requests_of("child") == []

    held.release()
    await tree.wait_quiet(root)
    assert first_texts(child) == ["B", "D"]
    assert turn_ends(child) == [aborted(USER), COMPLETED, COMPLETED]
    assert len(watch.requests_of("child")) == 2


async def test_interrupting_a_child_in_maintenance_aborts_the_task_and_keeps_its_latch(make_tree):
    """§10.3: the maintenance task's signal aborts with cause `parent`; a followup that latched
    during maintenance still runs once maintenance ends."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), text("C STARTED"), text("b"), text("noted")]},
        "grand": {"spawnedBy": "sb", "replies": [text("grand answer")]},
    })
    held = watch.hold("grand")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.idle_after_run("child"))
    child = watch.agents["child"]
    done = child.run_maintenance(maintenance_until(asyncio.Event()))  # ends only on its abort
    maintenance = child.phase
    await tree.manager.followup(root, child.id, "B", USER, fresh_signal())
    assert maintenance.wake_requested is True

    interrupt(tree.manager, child.id, AncestorAuthority(root))
    assert child.cancels == [(PARENT, True)]
    assert maintenance.abort.signal.aborted and maintenance.abort.signal.reason == PARENT
    assert maintenance.wake_requested is True
    await reach(done)
    await reach(child.when_idle())
    assert first_texts(child)[-1] == "B"
    assert turn_ends(child) == [COMPLETED, COMPLETED]

    held.release()
    await tree.wait_quiet(root)
    assert source_kinds(entered(child))[-1] == "subagent-settled"


class _ClosingGate:
    """Provider wrapper at the model seam: the gated session's stream `aclose` blocks until
    `release` is set; other sessions stream unchanged."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.gated: str | None = None  # the one session whose streams are gated
        self.closing = asyncio.Event()
        self.release = asyncio.Event()

    def bind_root(self, session_id: str) -> None:
        self.inner.bind_root(session_id)

    def stream(self, request: Any, signal: Any, on_retry: Any) -> Any:
        inner = self.inner.stream(request, signal, on_retry)
        return _GatedStream(self, inner) if request.session_id == self.gated else inner

    async def aclose(self) -> None:
        await self.inner.aclose()


class _GatedStream:
    def __init__(self, gate: _ClosingGate, inner: Any) -> None:
        self.gate = gate
        self.inner = inner

    def __aiter__(self) -> _GatedStream:
        return self

    async def __anext__(self) -> Any:
        return await self.inner.__anext__()

    async def aclose(self) -> None:
        self.gate.closing.set()
        await self.gate.release.wait()
        await self.inner.aclose()


async def test_interrupt_returns_before_a_blocked_stream_close_is_released(make_tree):
    """Matrix 76: `interrupt` is a plain function that returns while the target's stream close is
    still blocked; the turn ends `aborted` only after the test releases the close."""
    assert inspect.iscoroutinefunction(interrupt) is False
    tree = await make_tree({
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "child": {"spawnedBy": "sa", "replies": [HANG]},
    }, agent_class=RecordingAgent)
    watch = TreeWatch(tree)
    gate = _ClosingGate(tree.provider)
    tree.provider = gate  # agents built from here on stream through the gate
    tree.agent_hooks.append(lambda agent: setattr(gate, "gated", agent.id) if agent.header.get("parentSession") else None)
    root = await tree.create_root()
    try:
        await _interrupt_with_blocked_close(tree, watch, gate, root)
    finally:
        gate.release.set()  # never leave teardown waiting on the blocked close


async def _interrupt_with_blocked_close(tree: Any, watch: TreeWatch, gate: _ClosingGate, root: Agent) -> None:
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    child = watch.agents["child"]

    returned = interrupt(tree.manager, child.id, UserAuthority(root.id))
    assert returned is None and not inspect.isawaitable(returned)
    assert child.cancels == [(USER, True)]
    assert not gate.release.is_set()
    await reach(gate.closing)
    assert child.status == "running" and turn_ends(child) == []

    gate.release.set()
    await reach(child.when_idle())
    assert turn_ends(child) == [aborted(USER)]
