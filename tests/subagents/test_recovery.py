"""Resume finishes the tree (issue 9 items 3 and 6(a)): one deterministic test per teardown / cold
resume crash window, each over hand-made logs identical to the state the crash leaves.

The logs are written before the Tree exists; `create_root(resume=ROOT)` must find every descendant
through `parentSession`, make the owed ones resident, and deliver each epoch's notice exactly once
(message id `notice_id(child, epoch)`), however many times the tree is resumed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crash_kit import (
    CHILD,
    ROOT,
    Log,
    assistant,
    entered_ids,
    epoch_markers,
    events_of,
    notice,
    notice_id,
    notices_in,
    user,
    write,
)
from tree_kit import hold, reach


SPAWN = {"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "do W"}}
SEND = {"id": "s1", "name": "send_message", "arguments": {"agent_id": CHILD, "message": "SECOND"}}


def scripts(root_tail: list[dict[str, Any]], child: list[dict[str, Any]]) -> dict[str, Any]:
    """Root: spawn, STARTED, then `root_tail`; child `w` bound by spawnCallId c1."""
    return {
        "root": {"replies": [{"toolCalls": [SPAWN]}, {"text": "STARTED"}, *root_tail]},
        "w": {"spawnedBy": "c1", "replies": child},
    }


def root_log_started() -> Log:
    """The root's turn 1: spawned the child and ended with STARTED (both replies consumed)."""
    log = Log().insert(user("task", "go"))
    return log.answered_turn(user("task", "go"), assistant("a1", calls=[SPAWN]), assistant("a2", "STARTED"))


def child_log_settled(log: Log | None = None) -> Log:
    """Epoch 1 of the child: prompt accepted, turn 1 answered W_DONE and completed (settled-looking)."""
    log = log or Log().descriptor("w", "c1").epoch(1)
    log.insert(user("p1", "do W"))
    return log.answered_turn(user("p1", "do W"), assistant("w1", "W_DONE"))


async def resume(make_tree: Any, home: Path, agents: dict[str, Any]) -> Any:
    tree = await make_tree(agents)
    root = await tree.create_root(resume=ROOT)
    await reach(tree.wait_quiet(root))
    await tree.shutdown(root)
    return tree


async def test_crash_inside_teardown_before_the_notice_resume_delivers_exactly_one(make_tree, home: Path) -> None:
    """Window "inside teardown before the notice": the child's epoch 1 looks settled, its parent's
    log has no notice. Resume makes the child resident (continuing epoch 1, no new marker), it
    settles at once, and the root gets the one notice with the epoch's id and the child's output."""
    write(home, ROOT, root_log_started())
    write(home, CHILD, child_log_settled(), parent=ROOT, depth=1)

    tree = await resume(make_tree, home, scripts([{"text": "NOTED"}], [{"text": "W_DONE"}]))

    root_events = events_of(home, ROOT)
    got = notices_in(root_events, CHILD)
    assert [m["id"] for m in got] == [notice_id(CHILD, 1)]
    assert got[0]["source"]["stopReason"] == "completed"
    assert any(b.get("text") == "W_DONE" for b in got[0]["content"])
    assert entered_ids(root_events).count(notice_id(CHILD, 1)) == 1
    assert epoch_markers(events_of(home, CHILD)) == [1]
    assert [r.session_id for r in tree.provider.requests] == [ROOT]  # the root's NOTED turn only
    assert tree.provider.inner.finish_checks() == []


async def test_crash_between_the_notice_and_release_ownership_delivers_no_second_notice(
    make_tree, home: Path
) -> None:
    """Window "between the notice and release_ownership": the notice is durable in the root's log
    (pending, not yet claimed). Resume must not send a second one: the root's next turn enters the
    one notice, and the child is not made resident at all."""
    root = root_log_started().insert(notice(CHILD, 1, "W_DONE"))
    write(home, ROOT, root)
    write(home, CHILD, child_log_settled(), parent=ROOT, depth=1)

    tree = await resume(make_tree, home, scripts([{"text": "NOTED"}], [{"text": "W_DONE"}]))

    root_events = events_of(home, ROOT)
    assert [m["id"] for m in notices_in(root_events, CHILD)] == [notice_id(CHILD, 1)]
    assert entered_ids(root_events).count(notice_id(CHILD, 1)) == 1
    assert CHILD not in tree.manager.counters.epochs  # never resident in the resumed run
    assert [r.session_id for r in tree.provider.requests] == [ROOT]  # the root's turn for the notice
    assert tree.provider.inner.finish_checks() == []


async def test_a_notice_already_entered_by_the_parent_is_not_sent_again(make_tree, home: Path) -> None:
    """The same window one step later: the root already answered the notice. Nothing runs."""
    n = notice(CHILD, 1, "W_DONE")
    root = root_log_started().insert(n).answered_turn(n, assistant("a3", "NOTED"))
    write(home, ROOT, root)
    write(home, CHILD, child_log_settled(), parent=ROOT, depth=1)

    tree = await resume(make_tree, home, scripts([{"text": "NOTED"}], [{"text": "W_DONE"}]))

    assert [m["id"] for m in notices_in(events_of(home, ROOT), CHILD)] == [notice_id(CHILD, 1)]
    assert tree.provider.requests == []


async def test_crash_during_a_cold_resume_continues_the_new_epoch_and_sends_its_one_notice(
    make_tree, home: Path
) -> None:
    """Window "during a cold resume": epoch 1 was heard; the root's follow-up cold-resumed the
    child (marker 2, the message inserted, its turn cut off before the model answered). Resume
    continues epoch 2 (no third marker), the cut-off turn gets one continuation, and the root hears
    epoch 2 exactly once; epoch 1's notice is not repeated."""
    n1 = notice(CHILD, 1, "W_DONE")
    root = root_log_started().insert(n1).answered_turn(n1, assistant("a3", calls=[SEND]), assistant("a4", "SENT"))
    child = child_log_settled().epoch(2).insert(user("p2", "SECOND", kind="coordinator", form="relay",
                                                      senderSessionId=ROOT))
    child.open_turn(user("p2", "SECOND", kind="coordinator", form="relay", senderSessionId=ROOT))
    write(home, ROOT, root)
    write(home, CHILD, child, parent=ROOT, depth=1)
    agents = scripts([{"toolCalls": [SEND]}, {"text": "SENT"}, {"text": "NOTED_2"}],
                     [{"text": "W_DONE"}, {"text": "SECOND_OK"}])

    tree = await resume(make_tree, home, agents)

    root_events = events_of(home, ROOT)
    assert [m["id"] for m in notices_in(root_events, CHILD)] == [notice_id(CHILD, 1), notice_id(CHILD, 2)]
    child_events = events_of(home, CHILD)
    assert epoch_markers(child_events) == [1, 2]
    continuations = [e["data"] for e in child_events
                     if e["type"] == "user/message" and e["data"]["source"].get("form") == "resume"]
    assert len(continuations) == 1
    assert [r.session_id for r in tree.provider.requests] == [CHILD, ROOT]
    assert tree.provider.inner.finish_checks() == []


async def test_a_cold_resume_cut_before_its_message_owes_no_notice(make_tree, home: Path) -> None:
    """The cold resume cut between its marker and the submission: epoch 2 accepted nothing, so no
    notice is owed and nothing is made resident (the root's send is the repaired, unknown call)."""
    n1 = notice(CHILD, 1, "W_DONE")
    root = root_log_started().insert(n1).answered_turn(n1, assistant("a3", "NOTED"))
    write(home, ROOT, root)
    write(home, CHILD, child_log_settled().epoch(2), parent=ROOT, depth=1)

    tree = await resume(make_tree, home, scripts([{"text": "NOTED"}], [{"text": "W_DONE"}]))

    assert [m["id"] for m in notices_in(events_of(home, ROOT), CHILD)] == [notice_id(CHILD, 1)]
    assert tree.provider.requests == []


async def test_exactly_once_across_repeated_resumes(make_tree, home: Path) -> None:
    """Any number of resume cycles: the second and third find the notice in the root's log."""
    write(home, ROOT, root_log_started())
    write(home, CHILD, child_log_settled(), parent=ROOT, depth=1)
    agents = scripts([{"text": "NOTED"}], [{"text": "W_DONE"}])
    for _ in range(3):
        await resume(make_tree, home, agents)
    assert [m["id"] for m in notices_in(events_of(home, ROOT), CHILD)] == [notice_id(CHILD, 1)]


async def test_a_child_cut_off_mid_turn_is_continued_and_its_parent_hears_it(make_tree, home: Path) -> None:
    """A child mid-turn at the crash (its prompt entered, no answer) is no longer left dormant: it
    is resumed, continues, and its epoch's notice reads completed with the scripted output."""
    write(home, ROOT, root_log_started())
    child = Log().descriptor("w", "c1").epoch(1).insert(user("p1", "do W"))
    write(home, CHILD, child.open_turn(user("p1", "do W")), parent=ROOT, depth=1)

    tree = await resume(make_tree, home, scripts([{"text": "NOTED"}], [{"text": "W_DONE"}]))

    got = notices_in(events_of(home, ROOT), CHILD)
    assert [m["id"] for m in got] == [notice_id(CHILD, 1)]
    assert got[0]["source"]["stopReason"] == "completed"
    assert [r.session_id for r in tree.provider.requests] == [CHILD, ROOT]
    assert tree.provider.inner.finish_checks() == []


@pytest.mark.parametrize("target", ["next-turn", "next-step"])
async def test_pending_work_in_a_child_is_run_before_its_notice(make_tree, home: Path, target: str) -> None:
    """Unclaimed work after the rebuild (a queued follow-up, or a notice kept from a closing
    residency) is claimed in a resumed residency; that residency is a new epoch (epoch 1 was heard)
    and sends one notice of its own."""
    n1 = notice(CHILD, 1, "W_DONE")
    root = root_log_started().insert(n1).answered_turn(n1, assistant("a3", "NOTED"))
    child = child_log_settled().insert(user("p2", "MORE"), target)
    write(home, ROOT, root)
    write(home, CHILD, child, parent=ROOT, depth=1)
    agents = scripts([{"text": "NOTED"}, {"text": "NOTED_2"}], [{"text": "W_DONE"}, {"text": "MORE_OK"}])

    await resume(make_tree, home, agents)

    child_events = events_of(home, CHILD)
    assert epoch_markers(child_events) == [1, 2]
    assert entered_ids(child_events).count("p2") == 1
    assert [m["id"] for m in notices_in(events_of(home, ROOT), CHILD)] == [notice_id(CHILD, 1), notice_id(CHILD, 2)]


# -- issue 9 item 4: notices are never lost to an offline or closing parent ------------------------


def _root_and_child_scripts() -> dict[str, Any]:
    return {
        "root": {"replies": [{"toolCalls": [SPAWN]}, {"text": "STARTED"}, {"text": "NOTED"}]},
        "w": {"spawnedBy": "c1", "replies": [{"text": "W_DONE"}]},
    }


async def _started(make_tree: Any) -> tuple[Any, Any, Any]:
    """A tree whose root spawned `w` (held at its first step) and finished turn 1 with STARTED."""
    from dsh.loader.agent import user_message


    tree = await make_tree(_root_and_child_scripts())
    gate = hold(tree, "w")
    root = await tree.create_root()
    root.followup(user_message("go", {"kind": "user"}))
    await reach(gate.reached.wait())
    await reach(root.when_idle())
    return tree, root, gate


async def test_a_notice_to_a_parent_that_is_not_live_is_kept_in_its_session_and_delivered_once(
    make_tree, home: Path
) -> None:
    """The root leaves while its child works; the child's notice is written into the root's own file
    (an insert splice, pending), and the root's next residency enters it once, before new input."""
    import asyncio

    tree, root, gate = await _started(make_tree)
    child_id = tree.provider.inner.session_of("w")
    ended = asyncio.Event()
    tree.manager.events.on("subagent/end", lambda _e: ended.set())
    await reach(root.dispose())
    gate.release()
    await reach(ended.wait())
    await reach(asyncio.gather(*tree.manager.offline_deliveries))

    kept = events_of(home, root.id)
    assert [m["id"] for m in notices_in(kept, child_id)] == [notice_id(child_id, 1)]
    assert notice_id(child_id, 1) not in entered_ids(kept)

    again = await make_tree(_root_and_child_scripts())
    resumed = await again.create_root(resume=root.id)
    await reach(again.wait_quiet(resumed))
    await again.shutdown(resumed)
    final = events_of(home, root.id)
    assert [m["id"] for m in notices_in(final, child_id)] == [notice_id(child_id, 1)]
    assert entered_ids(final).count(notice_id(child_id, 1)) == 1
    assert [r.session_id for r in again.provider.requests] == [root.id]


async def test_a_closing_parents_disposal_keeps_the_injected_notice_for_its_next_residency(
    make_tree, home: Path
) -> None:
    """A drain injects the child's `aborted` notice into the closing root, which starts no turn for
    it; the root's disposal no longer cancels it, so the next residency enters it exactly once."""
    from dsh.loader.subagents import drain_descendants

    tree, root, _gate = await _started(make_tree)
    child_id = tree.provider.inner.session_of("w")
    turns_before = sum(e["type"] == "turn/start" for e in root.session.events)
    await reach(drain_descendants(tree.manager, [root]))
    await reach(root.dispose())

    kept = events_of(home, root.id)
    got = notices_in(kept, child_id)
    assert [(m["id"], m["source"]["stopReason"]) for m in got] == [(notice_id(child_id, 1), "aborted")]
    assert sum(e["type"] == "turn/start" for e in kept) == turns_before  # no model turn while closing
    assert not any(e["type"] == "agent/inbox/spliced" and e["data"].get("outcome") == "canceled" for e in kept)

    again = await make_tree(_root_and_child_scripts())
    resumed = await again.create_root(resume=root.id)
    await reach(again.wait_quiet(resumed))
    await again.shutdown(resumed)
    final = events_of(home, root.id)
    assert entered_ids(final).count(notice_id(child_id, 1)) == 1
    assert len(notices_in(final, child_id)) == 1


async def test_a_live_parent_whose_log_holds_the_notice_id_never_gets_it_twice(make_tree, home: Path) -> None:
    """The last guard of "never insert it twice": `deliver_live` checks the parent's whole log, not
    only its pending queue, so a notice already claimed and answered is not inserted again."""
    from dsh.loader.subagents import settlement_message
    from dsh.loader.subagents.notice import deliver_live

    tree = await make_tree({"root": {"replies": [{"text": "NOTED"}]}})
    root = await tree.create_root()
    message = settlement_message(CHILD, "completed", None, epoch=1)
    deliver_live(tree.manager, root, message)
    await reach(root.when_idle())
    assert entered_ids(root.session.events) == [message["id"]]  # claimed and answered: no longer pending

    deliver_live(tree.manager, root, dict(message))

    assert [m["id"] for m in notices_in(root.session.events, CHILD)] == [message["id"]]
    assert root.status == "idle"
