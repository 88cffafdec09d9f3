"""Drains and the disposal transaction (SPEC §8.11–§8.12; matrix 47–52, 59, 63, 66).

Drains close admission before their first await (span S10) and open disposals top-down (span S5);
release is child-first, terminal facts come from the epoch's own log, and a failing handle or flush
never stops the other branches. Held turns are pre-step gates that also give way to the turn's abort,
so a drain's cancel is what ends them.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from dsh.loader.agent import Agent
from dsh.loader.errors import SubagentError
from dsh.loader.ids import new_root_id
from dsh.loader.session import make_header
from dsh.loader.subagents import drain, drain_children, drain_descendants
from dsh.loader.texts import TEXTS, render
from tree_kit import (
    FailOnceIO,
    assert_script_consumed,
    calls,
    entered,
    events_of,
    failing_release,
    fresh_signal,
    hold,
    inserts,
    lifecycle,
    log,
    on_agent,
    reach,
    spawn,
    text,
    turn_end_kinds,
    user_texts,
)



def notice_texts(message: dict) -> list[str]:
    return [b["text"] for b in message["content"]]


async def test_drain_releases_grandchild_first_and_closes_admission(make_tree):
    """Matrix 47: `drain()` over child + grandchild disposes the grandchild first; both sessions stay
    loadable; afterwards start and followup fail `DRAINING` (T-ERR-DRAINING)."""
    tree = await make_tree(
        {
            "root": {"replies": []},
            "child": {"order": 1, "replies": [calls(spawn("g")), text("WAITING")]},
            "grand": {"spawnedBy": "g", "replies": []},
        }
    )
    gate = hold(tree, "grand")
    root = await tree.create_root()
    edges = lifecycle(tree)
    disposed: list[str] = []
    tree.registry.events.on("agent/disposed", lambda p: disposed.append(p["agent"].id))
    child_id, _ = await tree.manager.start_continuable(root, "c", "spawn one", "c", fresh_signal())
    await reach(gate.reached.wait())
    await reach(tree.registry.get(child_id).when_idle())
    grand_id = tree.provider.inner.session_of("grand")

    await reach(drain(tree.manager))

    assert disposed == [grand_id, child_id]
    assert [e["sessionId"] for e in edges.ends] == [grand_id, child_id]
    assert tree.manager.activations == {}
    for session_id in (grand_id, child_id):
        session = await tree.store.load(session_id)
        assert session.events == log(tree, session_id)
        await tree.store.close(session)
    with pytest.raises(SubagentError) as started:
        await tree.manager.start_continuable(root, "late", "x", None, fresh_signal())
    with pytest.raises(SubagentError) as followed:
        await tree.manager.followup(root, child_id, "late", {"kind": "user"}, fresh_signal())
    for caught in (started, followed):
        assert (caught.value.code, caught.value.message) == ("DRAINING", TEXTS["T-ERR-DRAINING"])
    assert_script_consumed(tree)


async def test_scoped_drain_cancels_one_forest_top_down_and_keeps_the_other_admitting(make_tree, home):
    """Matrix 48: two concurrent `drain_descendants([root1])` cancel root1's forest top-down inside
    one sync span; root2's forest still accepts followups; starts under root1 fail `DRAINING`
    (T-ERR-DRAINING-SCOPED) until that exact root1 Agent is disposed."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "c1": {"order": 1, "replies": [calls(spawn("g1"))]},
            "g1": {"spawnedBy": "g1", "replies": []},
            "c2": {"order": 2, "replies": [text("C2_ONE"), text("C2_TWO")]},
        }
    )
    c1_gate, g1_gate, c2_gate = hold(tree, "c1", 1, 2), hold(tree, "g1"), hold(tree, "c2")
    root2 = await tree.create_root()  # bound to the "root" script
    session = await tree.store.create(make_header(new_root_id(), cwd=str(home)))
    root1 = tree.make_agent(session, "root")  # a second host root; it never asks the model
    tree.registry.register(root1)
    tree.roots.append(root1)
    edges = lifecycle(tree)
    c1_id, _ = await tree.manager.start_continuable(root1, "c1", "spawn", "c1", fresh_signal())
    c2_id, _ = await tree.manager.start_continuable(root2, "c2", "work", "c2", fresh_signal())
    for gate in (c1_gate, g1_gate, c2_gate):
        await reach(gate.reached.wait())
    g1_id = tree.provider.inner.session_of("g1")

    aborted: list[str] = []
    same_span: list[bool] = []

    def after_span() -> None:
        # Runs once the span that aborted c1 has ended: g1 must already be cancelled too.
        same_span.append(g1_gate.ctx.signal.aborted and not c2_gate.ctx.signal.aborted)

    def on_c1_abort(_reason: object) -> None:
        # The disposal is assigned before the cancel (S5 step 0 before step 2).
        aborted.append("c1" if tree.manager.activations[c1_id].disposal is not None else "c1-without-disposal")
        asyncio.get_running_loop().call_soon(after_span)

    c1_gate.ctx.signal.add_listener(on_c1_abort)
    g1_gate.ctx.signal.add_listener(lambda _r: aborted.append("g1"))

    await reach(asyncio.gather(
        drain_descendants(tree.manager, [root1]), drain_descendants(tree.manager, [root1])
    ))

    assert aborted == ["c1", "g1"] and same_span == [True]
    assert sorted(e["sessionId"] for e in edges.ends) == sorted([c1_id, g1_id])
    assert set(tree.manager.activations) == {c2_id}
    assert tree.manager.activations[c2_id].disposal is None
    await tree.manager.followup(root2, c2_id, "more", {"kind": "user"}, fresh_signal())
    scoped = ("DRAINING", render("T-ERR-DRAINING-SCOPED", root=root1.id))
    with pytest.raises(SubagentError) as started:
        await tree.manager.start_continuable(root1, "late", "x", None, fresh_signal())
    with pytest.raises(SubagentError) as followed:
        await tree.manager.followup(root1, c1_id, "late", {"kind": "user"}, fresh_signal())
    assert (started.value.code, started.value.message) == scoped
    assert (followed.value.code, followed.value.message) == scoped

    await reach(root1.dispose())
    assert tree.manager.closing_for(root1) is None and root1 not in tree.manager.closing_scopes

    c2_gate.release()
    await reach(tree.wait_quiet(root2))
    assert user_texts(log(tree, c2_id)) == ["work", "more"]
    assert [e["stopReason"] for e in edges.end_of(c2_id)] == ["completed"]
    assert_script_consumed(tree)


async def test_selected_drain_releases_one_forest_and_checks_authority_first(make_tree):
    """Matrix 49: `drain_children(root, [target, target])` releases target and its grandchild and
    leaves the sibling untouched; a stale parent object gets T-ERR-STALE even with `[]`; a live foreign
    parent gets T-ERR-NOT-CHILD for `[target]`, while `[]` is an accepted no-op; a list mixing an own
    child with a grandchild is refused before any disposal opens."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED_T"), text("NOTED_S")]},
            "target": {"order": 1, "replies": [calls(spawn("g")), text("T_WAITING")]},
            "grand": {"spawnedBy": "g", "replies": []},
            "sibling": {"order": 2, "replies": [text("S_DONE")]},
        }
    )
    g_gate, s_gate = hold(tree, "grand"), hold(tree, "sibling")
    root = await tree.create_root()
    edges = lifecycle(tree)
    t_id, _ = await tree.manager.start_continuable(root, "t", "spawn", "t", fresh_signal())
    s_id, _ = await tree.manager.start_continuable(root, "s", "work", "s", fresh_signal())
    await reach(g_gate.reached.wait())
    await reach(s_gate.reached.wait())
    await reach(tree.registry.get(t_id).when_idle())
    g_id = tree.provider.inner.session_of("grand")
    sibling = tree.registry.get(s_id)

    stale = Agent(root.session, store=tree.store, provider=tree.provider)  # same id, not registered
    for ids in ([], [t_id]):
        with pytest.raises(SubagentError) as caught:
            await drain_children(tree.manager, stale, ids)
        assert (caught.value.code, caught.value.message) == ("UNAUTHORIZED", render("T-ERR-STALE", aid=root.id))
    with pytest.raises(SubagentError) as foreign:
        await drain_children(tree.manager, sibling, [t_id])
    assert (foreign.value.code, foreign.value.message) == (
        "UNAUTHORIZED", render("T-ERR-NOT-CHILD", pid=s_id, id=t_id)
    )
    assert await drain_children(tree.manager, sibling, []) is None
    with pytest.raises(SubagentError) as mixed:  # every id is checked before any disposal opens
        await drain_children(tree.manager, root, [t_id, g_id])
    assert (mixed.value.code, mixed.value.message) == (
        "UNAUTHORIZED", render("T-ERR-NOT-CHILD", pid=root.id, id=g_id)
    )
    assert all(a.disposal is None for a in tree.manager.activations.values())

    await reach(drain_children(tree.manager, root, [t_id, t_id]))

    assert [e["sessionId"] for e in edges.ends] == [g_id, t_id]
    assert set(tree.manager.activations) == {s_id}
    assert tree.manager.activations[s_id].disposal is None and not s_gate.ctx.signal.aborted
    assert tree.manager.closing_for(root) is None  # the parent keeps admitting
    s_gate.release()
    await reach(tree.wait_quiet(root))
    assert [e["stopReason"] for e in edges.end_of(s_id)] == ["completed"]
    assert turn_end_kinds(log(tree, s_id)) == ["completed"]
    assert_script_consumed(tree)


async def test_drain_with_a_failing_handle_disposal_fails_after_every_branch(make_tree, caplog):
    """Matrix 50: when one child's handle disposal raises, `drain()` raises one
    `ACTIVATION_TEARDOWN_FAILED` only after every branch finished; the failed child is gone and its
    notice says `error` with no output (its earlier answer is withheld)."""
    broken: set[str] = set()

    tree = await make_tree(
        {
            "root": {"replies": []},
            "a": {"order": 1, "replies": [text("A_ANSWER")]},
            "b": {"order": 2, "replies": []},
        },
        agent_class=failing_release(broken),
    )
    a_gate = hold(tree, "a", turn=2, step=1)
    root = await tree.create_root()
    edges = lifecycle(tree)
    a_id, _ = await tree.manager.start_continuable(root, "a", "answer", "a", fresh_signal())
    await tree.manager.followup(root, a_id, "second", {"kind": "user"}, fresh_signal())
    broken.add(a_id)

    async def slow_b(ctx) -> None:  # b's teardown cannot finish before a's has failed
        await edges.ended(a_id).wait()

    on_agent(tree, "b", lambda agent: agent.pre_step.add(slow_b))
    b_id, _ = await tree.manager.start_continuable(root, "b", "work", "b", fresh_signal())
    await reach(a_gate.reached.wait())

    with pytest.raises(SubagentError) as caught:
        await reach(drain(tree.manager))

    assert caught.value.code == "ACTIVATION_TEARDOWN_FAILED"
    assert f"handle of {a_id} broke" in caught.value.message
    assert [e["sessionId"] for e in edges.ends] == [a_id, b_id]
    assert a_id not in tree.registry and tree.manager.activations == {}
    a_end = edges.end_of(a_id)[0]
    assert a_end["stopReason"] == "error" and "output" not in a_end
    notices = {m["source"]["senderSessionId"]: (t, m) for t, m in inserts(log(tree, root), "subagent-settled")}
    target, notice = notices[a_id]
    assert target == "next-step"  # the root is closing: injected
    assert notice["source"]["stopReason"] == "error"
    failed = render("T-ERR-TEARDOWN", id=a_id, detail=f"handle of {a_id} broke")
    assert notice["source"]["error"] == {"code": "ACTIVATION_TEARDOWN_FAILED", "message": failed}
    assert notice_texts(notice) == [
        render("T-NOTICE-error-detail", id=a_id, code="ACTIVATION_TEARDOWN_FAILED", message=failed),
        TEXTS["T-NOTICE-NO-OUTPUT"],
    ]
    assert notices[b_id][1]["source"]["stopReason"] == "aborted"
    assert any(r.levelno == logging.WARNING and r.getMessage().startswith(
        render("T-LOG-TEARDOWN-FAILED", id=a_id, detail="")) for r in caplog.records)
    assert_script_consumed(tree)


async def test_drain_cancels_a_followup_queued_behind_a_held_turn(make_tree):
    """Matrix 51: a followup queued behind a held turn is removed by the drain's cancel (a canceled
    splice) and never becomes a `user/message`; the notice says `aborted`."""
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": []}})
    gate = hold(tree, "child")
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "prompt", "c", fresh_signal())
    await reach(gate.reached.wait())
    queued = await tree.manager.followup(root, child_id, "queued", {"kind": "user"}, fresh_signal())

    await reach(drain(tree.manager))

    events = log(tree, child_id)
    assert "queued" not in user_texts(events)
    cancels = [s for s in events_of(events, "agent/inbox/spliced") if s.get("outcome") == "canceled"]
    assert [(s["target"], s["removedCount"]) for s in cancels] == [("next-turn", 1)]
    assert [m["id"] for t, m in inserts(events) if t == "next-turn"][-1] == queued
    assert turn_end_kinds(events) == ["aborted"]
    [(_, notice)] = inserts(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "aborted"
    assert_script_consumed(tree)


async def test_failing_final_flush_is_logged_and_settlement_proceeds(make_tree, caplog):
    """Matrix 52: the final flush at settlement raises: T-LOG-FLUSH-FAILED is logged, the disposal
    continues (the close retries the batch) and the notice says `completed` with the answer."""
    tree = await make_tree(
        {"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": [text("the answer")]}},
        batch_delay_ms=60_000,  # writes happen only at barriers, so the settlement flush has work
    )
    io = FailOnceIO()
    tree.store.io = io

    def arm_when_idle(agent: Agent) -> None:
        path = tree.store.path(agent.id)
        agent.events.on("agent/status", lambda p: p["status"] == "idle" and io.arm(path))

    on_agent(tree, "child", arm_when_idle)
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "prompt", "c", fresh_signal())

    await reach(tree.wait_quiet(root))

    assert io.failed == [tree.store.path(child_id)]
    flush_failed = render("T-LOG-FLUSH-FAILED", id=child_id, detail="")
    assert [r.levelno for r in caplog.records if r.getMessage().startswith(flush_failed)] == [logging.WARNING]
    assert any("simulated disk full" in r.getMessage() for r in caplog.records if r.getMessage().startswith(flush_failed))
    assert [e["stopReason"] for e in edges.end_of(child_id)] == ["completed"]
    assert turn_end_kinds(log(tree, child_id)) == ["completed"]  # the close wrote the retried batch
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "completed"
    assert notice_texts(notice)[1:] == [TEXTS["T-NOTICE-OUTPUT"], "the answer"]
    assert_script_consumed(tree)


@pytest.mark.parametrize(
    ("held_turn", "expected"),
    [
        pytest.param(2, [TEXTS["T-NOTICE-OUTPUT"], "the answer"], id="m59-second-turn"),
        pytest.param(1, [TEXTS["T-NOTICE-NO-OUTPUT"]], id="m59-first-turn"),
    ],
)
async def test_drain_of_a_turn_held_after_its_claim_reports_aborted(make_tree, held_turn, expected):
    """Matrix 59: a turn held at pre-step after its claim, then `drain()`: the notice says `aborted`;
    with turn 2 held it carries turn 1's answer, with turn 1 held there is no output."""
    tree = await make_tree(
        {"root": {"replies": []}, "child": {"order": 1, "replies": [text("the answer")] if held_turn == 2 else []}}
    )
    gate = hold(tree, "child", turn=held_turn, step=1)
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "prompt", "c", fresh_signal())
    if held_turn == 2:
        await tree.manager.followup(root, child_id, "second", {"kind": "user"}, fresh_signal())
    await reach(gate.reached.wait())
    assert [m["content"][0]["text"] for m in gate.ctx.claimed] == (["second"] if held_turn == 2 else ["prompt"])

    await reach(drain(tree.manager))

    assert turn_end_kinds(log(tree, child_id))[-1] == "aborted"
    [(_, notice)] = inserts(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "aborted"
    assert notice_texts(notice) == [render("T-NOTICE-aborted", id=child_id), *expected]
    assert_script_consumed(tree)


async def test_drain_injects_one_aborted_notice_into_an_idle_parent(make_tree):
    """Matrix 63: `drain()` with a held child: the parent gets exactly one `aborted` notice by inject
    (a next-step insert splice), no `turn/start`, and stays idle."""
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": []}})
    gate = hold(tree, "child")
    root = await tree.create_root()
    statuses: list[str] = []
    root.events.on("agent/status", lambda p: statuses.append(p["status"]))
    child_id, _ = await tree.manager.start_continuable(root, "c", "prompt", "c", fresh_signal())
    await reach(gate.reached.wait())

    await reach(drain(tree.manager))

    events = log(tree, root)
    notices = inserts(events, "subagent-settled")
    assert [(t, m["source"]["senderSessionId"], m["source"]["stopReason"]) for t, m in notices] == [
        ("next-step", child_id, "aborted")
    ]
    assert events_of(events, "turn/start") == [] and entered(events) == []
    assert root.status == "idle" and statuses == []
    assert [m["id"] for m in root.inbox.next_step] == [notices[0][1]["id"]]
    assert_script_consumed(tree)


async def test_drain_during_materialization_rolls_the_start_back_without_a_notice(make_tree):
    """Matrix 66: a drain that begins while a start is materializing makes the start fail `DRAINING`
    before acceptance: the materialization rolls back, no edge, no notice."""
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": []}})
    root = await tree.create_root()
    edges = lifecycle(tree)
    drains: list[asyncio.Future[None]] = []

    def on_changed(_payload: object) -> None:
        # The first pulse with a materialization in flight: begin the drain (its S10 runs before the
        # materialization's file I/O completes).
        if tree.manager.materializations and not drains:
            drains.append(asyncio.ensure_future(drain(tree.manager)))

    tree.manager.events.on("changed", on_changed)

    with pytest.raises(SubagentError) as caught:
        await tree.manager.start_continuable(root, "c", "prompt", "c", fresh_signal())

    assert len(drains) == 1
    await reach(drains[0])
    assert (caught.value.code, caught.value.message) == ("DRAINING", TEXTS["T-ERR-DRAINING"])
    assert edges.starts == [] and edges.ends == []
    assert tree.manager.activations == {} and list(tree.registry) == [root]
    assert inserts(log(tree, root)) == []
    child_id = tree.provider.inner.session_of("child")
    assert child_id is not None and inserts(log(tree, child_id)) == []  # the prompt was never accepted
    assert tree.provider.requests == []
