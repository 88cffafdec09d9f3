"""Continuation manager: start, followup, cold resume, admission and ownership (SPEC §8.5–§8.10,
matrix 36–46).

Every test drives the runner's own runtime (`Tree`) over the JSONL store with `ReplayProvider` at the
model seam. Children are started either by the root's `subagent` tool or by calling the manager
directly with the root as parent (binding the child's script through `order`). Ordering comes from
pre-step gates and lifecycle facts, never from time.
"""

from __future__ import annotations

import asyncio

import pytest

from dsh.loader.abort import AbortController, Aborted
from dsh.loader.agent import user_message
from dsh.loader.errors import SubagentError
from dsh.loader.ids import new_child_id
from dsh.loader.subagents import state_of
from dsh.loader.texts import render
from tree_kit import (
    agents_of,
    assert_script_consumed,
    calls,
    entered,
    events_of,
    fresh_signal,
    hold,
    inserts,
    lifecycle,
    log,
    reach,
    requests_of,
    spawn,
    text,
    turn_end_kinds,
    user_texts,
)


async def test_start_resolves_at_acceptance_with_the_insert_id_and_descriptor_first(make_tree):
    """Matrix 36: `start_continuable` resolves at inbox acceptance: the returned message id is the
    insert's id, no request was made yet, the header names parent/origin/depth, and the descriptor
    precedes every inbox splice."""
    tree = await make_tree({"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": [text("OK")]}})
    root = await tree.create_root()

    child_id, message_id = await tree.manager.start_continuable(root, "a label", "do it", "sa", fresh_signal())

    child = tree.registry.get(child_id)
    assert child is not None and child.id == child_id
    assert requests_of(tree, child_id) == 0
    assert child.header["parentSession"] == root.id
    assert child.header["origin"] == "subagent"
    assert child.header["delegationDepth"] == 1
    assert child.header.get("cwd") == root.header.get("cwd")
    events = log(tree, child)
    types = [e["type"] for e in events]
    assert types[0] == "subagent/descriptor"
    assert events[0]["data"] == {
        "version": 1, "mode": "continuable", "provider": "spawn", "label": "a label", "model": "replay",
        "spawnCallId": "sa",
    }
    assert [m["id"] for _, m in inserts(events)] == [message_id]
    assert types.index("subagent/descriptor") < types.index("agent/inbox/spliced")

    await reach(tree.wait_quiet(root))
    assert user_texts(log(tree, child_id)) == ["do it"]
    assert_script_consumed(tree)


@pytest.mark.parametrize("direct", [pytest.param(True, id="m37-direct"), pytest.param(False, id="m37-tool")])
async def test_start_beyond_max_depth_fails_before_anything_is_created(make_tree, home, direct):
    """Matrix 37: a parent at `maxDepth` cannot start a child: `DEPTH_EXCEEDED` before any session,
    agent or Activation exists (direct call at depth 0 of 0; and through the tool at depth 1 of 1)."""
    if direct:
        tree = await make_tree({"root": {"replies": []}}, max_depth=0)
        root = await tree.create_root()
        with pytest.raises(SubagentError) as caught:
            await tree.manager.start_continuable(root, "deep", "do it", "sa", fresh_signal())
        assert caught.value.code == "DEPTH_EXCEEDED"
        assert caught.value.message == render("T-ERR-DEPTH", depth=1, max=0)
        assert sorted(p.name for p in (home / "sessions").iterdir()) == [root.id]
        assert len(tree.registry) == 1 and tree.manager.activations == {}
        return
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("mid")), text("STARTED"), text("NOTED")]},
            "mid": {"spawnedBy": "mid", "replies": [calls(spawn("deep")), text("COULD_NOT")]},
        },
        max_depth=1,
    )
    root = await tree.create_root()
    built = agents_of(tree)
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))
    mid = built["mid"][0]
    results = events_of(log(tree, mid.id), "tool/result")
    assert [r["error"]["code"] for r in results] == ["DEPTH_EXCEEDED"]
    assert results[0]["error"]["message"] == render("T-ERR-DEPTH", depth=2, max=1)
    assert sorted(p.name for p in (home / "sessions").iterdir()) == sorted([root.id, mid.id])
    assert set(built) == {"mid"}  # no agent was built for the refused grandchild
    assert_script_consumed(tree)


@pytest.mark.parametrize("when", [pytest.param("before-call", id="m38-before-call"),
                                  pytest.param("materializing", id="m38-materializing")])
async def test_start_whose_signal_aborts_before_acceptance_leaves_nothing_registered(make_tree, when):
    """Matrix 38: a caller signal aborted before acceptance rejects the start (already aborted at the
    call, or aborted while the child is materializing): no Activation, no live child, no edge."""
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": []}})
    root = await tree.create_root()
    edges = lifecycle(tree)
    controller = AbortController()
    if when == "before-call":
        controller.abort({"kind": "user"})
    else:
        # The child agent is registered inside the materialization; abort right there.
        tree.registry.events.on(
            "agent/registered", lambda p: p["agent"] is not root and controller.abort({"kind": "user"})
        )
    with pytest.raises(Aborted):
        await tree.manager.start_continuable(root, "c", "do it", "sa", controller.signal)
    assert list(tree.registry) == [root]
    assert tree.manager.activations == {} and tree.manager.materializations == set()
    child_id = tree.provider.inner.session_of("child")
    assert (child_id is None) == (when == "before-call")
    if child_id is not None:  # created, then rolled back: its session is closed again
        assert not tree.store.is_live(child_id) and inserts(log(tree, child_id)) == []
    assert edges.starts == [] and edges.ends == []
    assert tree.provider.requests == []


async def test_start_whose_signal_aborts_after_acceptance_leaves_the_child_running(make_tree):
    """Matrix 38: after acceptance the caller's signal is irrelevant: aborting it neither cancels nor
    disposes the child, which completes its turn and settles `completed`."""
    tree = await make_tree(
        {"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": [text("the answer")]}}
    )
    root = await tree.create_root()
    edges = lifecycle(tree)
    controller = AbortController()
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "sa", controller.signal)
    controller.abort({"kind": "user"})
    await reach(tree.wait_quiet(root))
    assert turn_end_kinds(log(tree, child_id)) == ["completed"]
    assert [e["stopReason"] for e in edges.end_of(child_id)] == ["completed"]
    assert_script_consumed(tree)


async def test_followups_to_a_running_child_queue_fifo_in_the_same_agent(make_tree):
    """Matrix 39: two followups to a running child land in the same agent (same epoch) and run as
    FIFO turns: the log enters prompt, first, second, one per turn."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "child": {"order": 1, "replies": [text("R1"), text("R2"), text("R3")]},
        }
    )
    gate = hold(tree, "child", turn=1, step=1)
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "prompt", "sa", fresh_signal())
    child = tree.registry.get(child_id)
    await reach(gate.reached.wait())
    ids = [
        await tree.manager.followup(root, child_id, text, {"kind": "user"}, fresh_signal())
        for text in ("first", "second")
    ]
    assert tree.registry.get(child_id) is child
    assert [m["id"] for t, m in inserts(log(tree, child))[1:]] == ids
    assert all(t == "next-turn" for t, _ in inserts(log(tree, child)))
    gate.release()
    await reach(tree.wait_quiet(root))

    events = log(tree, child_id)
    assert user_texts(events) == ["prompt", "first", "second"]
    assert [t["turn"] for t in events_of(events, "turn/start")] == [1, 2, 3]
    assert turn_end_kinds(events) == ["completed"] * 3
    assert [e["epoch"] for e in edges.starts] == [1]
    assert len(edges.ends) == 1
    assert_script_consumed(tree)


async def test_followup_to_a_settled_child_cold_resumes_a_second_epoch(make_tree):
    """Matrix 40: a followup to a settled child cold-resumes it: epoch 2 on a new Agent over the same
    session, one descriptor in the log, and a second notice (two in total)."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED1"), text("NOTED2")]},
            "child": {"order": 1, "replies": [text("FIRST"), text("SECOND")]},
        }
    )
    root = await tree.create_root()
    edges = lifecycle(tree)
    built = agents_of(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "one", "sa", fresh_signal())
    await reach(tree.wait_quiet(root))
    assert child_id not in tree.manager.activations

    await tree.manager.followup(root, child_id, "two", {"kind": "user"}, fresh_signal())
    await reach(tree.wait_quiet(root))

    assert len(built["child"]) == 2 and built["child"][0] is not built["child"][1]
    assert [(e["sessionId"], e["epoch"]) for e in edges.starts] == [(child_id, 1), (child_id, 2)]
    assert [(e["epoch"], e["stopReason"]) for e in edges.ends] == [(1, "completed"), (2, "completed")]
    events = log(tree, child_id)
    assert len(events_of(events, "subagent/descriptor")) == 1
    assert user_texts(events) == ["one", "two"]
    notices = entered(log(tree, root), "subagent-settled")
    assert [n["source"]["stopReason"] for n in notices] == ["completed", "completed"]
    assert [n["content"][-1]["text"] for n in notices] == ["FIRST", "SECOND"]
    assert_script_consumed(tree)


async def test_followup_to_a_child_waiting_on_its_grandchild_wakes_the_same_agent(make_tree):
    """Matrix 41: a child that is idle but owns a running grandchild is `waiting`; a followup wakes
    the same agent in the same epoch (no cold resume)."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "child": {"order": 1, "replies": [calls(spawn("g")), text("WAITING"), text("MORE_OK"), text("GRAND_NOTED")]},
            "grand": {"spawnedBy": "g", "replies": [text("GRAND_DONE")]},
        }
    )
    gate = hold(tree, "grand")
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "spawn one", "sa", fresh_signal())
    child = tree.registry.get(child_id)
    activation = tree.manager.activations[child_id]
    await reach(gate.reached.wait())
    await reach(child.when_idle())
    assert state_of(activation) == "waiting"

    await tree.manager.followup(root, child_id, "more", {"kind": "user"}, fresh_signal())
    assert child.status == "running"
    assert tree.manager.activations[child_id] is activation and tree.registry.get(child_id) is child
    await reach(child.when_idle())  # turn 2 done; still waiting on the grandchild
    gate.release()
    await reach(tree.wait_quiet(root))

    assert [e["sessionId"] for e in edges.starts].count(child_id) == 1
    events = log(tree, child_id)
    assert user_texts(events)[:2] == ["spawn one", "more"]
    assert [m["source"]["kind"] for m in entered(events)][2:] == ["subagent-settled"]
    assert_script_consumed(tree)


async def test_followup_from_a_stranger_is_refused_before_anything_is_queued(make_tree):
    """Matrix 42: a live agent that is not the child's parent gets `UNAUTHORIZED` T-ERR-NOT-PARENT,
    both while the child is resident and when it would need a cold resume (the file is untouched)."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED1"), text("NOTED2")]},
            "child": {"order": 1, "replies": [text("C_DONE")]},
            "stranger": {"order": 2, "replies": [text("S_DONE")]},
        }
    )
    child_gate = hold(tree, "child")
    stranger_gate = hold(tree, "stranger")
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    stranger_id, _ = await tree.manager.start_continuable(root, "s", "do it", "s", fresh_signal())
    stranger = tree.registry.get(stranger_id)
    await reach(child_gate.reached.wait())

    with pytest.raises(SubagentError) as resident:
        await tree.manager.followup(stranger, child_id, "hijack", {"kind": "user"}, fresh_signal())
    assert (resident.value.code, resident.value.message) == ("UNAUTHORIZED", render("T-ERR-NOT-PARENT", id=child_id))
    assert len(inserts(log(tree, tree.registry.get(child_id)))) == 1

    child_gate.release()
    await reach(edges.ended(child_id).wait())
    before = tree.store.path(child_id).read_bytes()
    with pytest.raises(SubagentError) as cold:
        await tree.manager.followup(stranger, child_id, "hijack", {"kind": "user"}, fresh_signal())
    assert (cold.value.code, cold.value.message) == ("UNAUTHORIZED", render("T-ERR-NOT-PARENT", id=child_id))
    assert tree.store.path(child_id).read_bytes() == before
    assert child_id not in tree.registry

    stranger_gate.release()
    await reach(tree.wait_quiet(root))
    assert "hijack" not in user_texts(log(tree, child_id))
    assert_script_consumed(tree)


async def test_followup_from_a_stale_parent_object_is_refused(make_tree):
    """Matrix 42: a parent object that is no longer the registered agent for its id (disposed) gets
    `UNAUTHORIZED` T-ERR-STALE; the resident child never sees the message."""
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": [text("DONE")]}})
    gate = hold(tree, "child")
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "sa", fresh_signal())
    await reach(gate.reached.wait())
    await reach(root.dispose())

    with pytest.raises(SubagentError) as caught:
        await tree.manager.followup(root, child_id, "late", {"kind": "user"}, fresh_signal())
    assert (caught.value.code, caught.value.message) == ("UNAUTHORIZED", render("T-ERR-STALE", aid=root.id))

    gate.release()
    await reach(edges.ended(child_id).wait())
    assert user_texts(log(tree, child_id)) == ["do it"]
    assert_script_consumed(tree)


@pytest.mark.parametrize("which", [pytest.param("one-shot", id="m43-one-shot"),
                                   pytest.param("unknown", id="m43-unknown"),
                                   pytest.param("malformed", id="m43-malformed")])
async def test_followup_to_a_non_continuable_or_unknown_id_is_not_resumable(make_tree, which):
    """Matrix 43: a one-shot child id → `NOT_RESUMABLE` T-ERR-NOT-CONTINUABLE; an unknown (or not even
    well-formed) id → `NOT_RESUMABLE` T-ERR-NOT-FOUND; nothing is created."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("fg", run_in_background=False)), text("DONE")]},
            "fg": {"spawnedBy": "fg", "replies": [text("FG_ANSWER")]},
        }
    )
    root = await tree.create_root()
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))
    one_shot_id = tree.provider.inner.session_of("fg")
    target, tid = {
        "one-shot": (one_shot_id, "T-ERR-NOT-CONTINUABLE"),
        "unknown": (new_child_id(), "T-ERR-NOT-FOUND"),
        "malformed": ("not-a-session", "T-ERR-NOT-FOUND"),
    }[which]
    before = tree.store.path(one_shot_id).read_bytes()

    with pytest.raises(SubagentError) as caught:
        await tree.manager.followup(root, target, "more", {"kind": "user"}, fresh_signal())

    assert (caught.value.code, caught.value.message) == ("NOT_RESUMABLE", render(tid, id=target))
    assert tree.manager.activations == {} and list(tree.registry) == [root]
    assert tree.store.path(one_shot_id).read_bytes() == before
    assert_script_consumed(tree)


@pytest.mark.parametrize("moment", [pytest.param("at-idle", id="m44-at-idle"),
                                    pytest.param("disposal-open", id="m44-disposal-open")])
async def test_delivery_racing_settlement_lands_exactly_once(make_tree, moment):
    """Matrix 44: a followup sent as the child goes idle (racing the watcher's decision), or while its
    disposal is already open, resolves, and its text appears exactly once in the child log. With the
    disposal open it waits for full release and cold-resumes epoch 2."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED1"), text("NOTED2")]},
            "child": {"order": 1, "replies": [text("FIRST"), text("SECOND")]},
        }
    )
    root = await tree.create_root()
    edges = lifecycle(tree)
    sent: list[asyncio.Task[str]] = []
    child_ids: list[str] = []

    def send() -> None:
        if not sent:
            sent.append(asyncio.ensure_future(
                tree.manager.followup(root, child_ids[0], "again", {"kind": "user"}, fresh_signal())
            ))

    if moment == "disposal-open":
        def on_changed(_payload: object) -> None:
            a = tree.manager.activations.get(child_ids[0]) if child_ids else None
            if a is not None and a.disposal is not None:
                send()

        tree.manager.events.on("changed", on_changed)
    child_id, _ = await tree.manager.start_continuable(root, "c", "first", "sa", fresh_signal())
    child_ids.append(child_id)
    if moment == "at-idle":
        child = tree.registry.get(child_id)
        child.events.on("agent/status", lambda p: p["status"] == "idle" and send())

    await reach(tree.wait_quiet(root))
    assert len(sent) == 1
    message_id = await reach(sent[0])  # resolves at acceptance, possibly after a cold read
    await reach(tree.wait_quiet(root))
    events = log(tree, child_id)
    assert user_texts(events).count("again") == 1
    assert [m["id"] for m in entered(events) if m["content"][0]["text"] == "again"] == [message_id]
    epochs = [e["epoch"] for e in edges.ends]
    if moment == "disposal-open":
        assert epochs == [1, 2]  # LOST: waited for full release, then cold-resumed
    else:
        assert epochs in ([1], [1, 2])  # either it won admission or it waited for the release
    assert len(entered(log(tree, root), "subagent-settled")) == len(epochs)
    tree.provider.inner.finish_checks()
    unconsumed = [] if len(epochs) == 2 else [("REPLAY_UNCONSUMED", "root")]
    assert [(v["code"], v.get("agent")) for v in tree.provider.inner.violations] == unconsumed


async def test_child_waiting_on_a_held_grandchild_stays_resident_and_releases_after_it(make_tree):
    """Matrix 45: a child whose turn ended but who owns a held grandchild stays resident (idle,
    `waiting`); the grandchild is released first, then the child."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "child": {"order": 1, "replies": [calls(spawn("g")), text("WAITING"), text("GOT_GRAND")]},
            "grand": {"spawnedBy": "g", "replies": [text("GRAND_DONE")]},
        }
    )
    gate = hold(tree, "grand")
    root = await tree.create_root()
    edges = lifecycle(tree)
    disposed: list[str] = []
    tree.registry.events.on("agent/disposed", lambda p: disposed.append(p["agent"].id))
    child_id, _ = await tree.manager.start_continuable(root, "c", "spawn one", "sa", fresh_signal())
    child = tree.registry.get(child_id)
    await reach(gate.reached.wait())
    await reach(child.when_idle())
    grand_id = tree.provider.inner.session_of("grand")

    a = tree.manager.activations[child_id]
    assert child.status == "idle" and a.disposal is None and a.owned_children == {grand_id}

    gate.release()
    await reach(tree.wait_quiet(root))
    assert [e["sessionId"] for e in edges.ends] == [grand_id, child_id]
    assert disposed == [grand_id, child_id]
    assert_script_consumed(tree)


async def test_root_parent_is_never_waiting_and_stays_registered_when_its_child_settles(make_tree):
    """Matrix 46: the root has no Activation at any pulse (it never joins the waiting graph) and is
    still the registered agent after its child settles."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
            "child": {"order": 1, "replies": [text("DONE")]},
        }
    )
    root = await tree.create_root()
    seen: list[bool] = []
    tree.manager.events.on("changed", lambda _p: seen.append(root.id in tree.manager.activations))
    at_end: list[bool] = []
    tree.manager.events.on("subagent/end", lambda _p: at_end.append(tree.registry.get(root.id) is root))
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))
    assert seen and not any(seen)
    assert at_end == [True]
    assert tree.registry.get(root.id) is root
    assert_script_consumed(tree)
