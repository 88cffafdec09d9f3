"""The settlement watcher as callbacks (SPEC §8.10, span S7; issue 13, `psched`).

The watcher no longer runs `decide` through `ChildLock.run` in a task of its own: it decides
synchronously when the child lock is free and after the lock's tail otherwise. These pin that the
decision is still taken inside the lock: a child that settles while an operation holds its lock is
not disposed until that operation ends.
"""

from __future__ import annotations

import asyncio

from tree_kit import assert_script_consumed, fresh_signal, hold, lifecycle, reach, text


async def test_a_child_settling_while_its_lock_is_held_is_disposed_only_after_the_holder(make_tree):
    tree = await make_tree({"root": {"replies": []}, "c": {"order": 1, "replies": [text("C_DONE")]}})
    gate = hold(tree, "c")
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "work", "c", fresh_signal())
    await reach(gate.reached.wait())
    a = tree.manager.activations[child_id]
    inside, leave = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        inside.set()
        await leave.wait()

    held = asyncio.ensure_future(tree.manager.locks.run(child_id, holder))
    await reach(inside.wait())
    gate.release()
    # The watcher's idle callback is queued on the activity before this waiter is woken, so it
    # has decided (or deferred) by the time the child reads idle here.
    await reach(a.agent.when_idle())
    assert a.agent.status == "idle" and not a.accepted and not a.owned_children  # settled by state
    assert a.disposal is None, "the watcher decided while another operation held the child lock"
    leave.set()
    await reach(held)
    await reach(edges.ended(child_id).wait())
    assert [e["stopReason"] for e in edges.end_of(child_id)] == ["completed"]
    assert child_id not in tree.manager.activations
    assert_script_consumed(tree)
