"""The settlement notice (SPEC §9; matrix 53–58, 60–62, 64, 65, 67).

One notice per settled, announced Activation, rendered from data by a pure function, delivered inside
the disposal transaction (span S6) before ownership is released, through `admit_waking` when the
parent is itself resident. Delivery never blocks or fails teardown. The two ordering rules of §9.3
each have a test that fails when the rule is reversed (57, 58).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from dsh.loader.agent import STOP_REASONS, Agent, text_block, user_message
from dsh.loader.subagents import drain_children, render_settlement_notice, settlement_message
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
    requests_of,
    spawn,
    text,
    turn_end_kinds,
)


CHILD = "0123456789abcdef"


def texts(blocks: list[dict[str, Any]]) -> list[str]:
    return [b["text"] for b in blocks]


def settled_inserts(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return inserts(events, "subagent-settled")


def release_when_idle(agent: Agent, gate: Any) -> None:
    agent.events.on("agent/status", lambda p: p["status"] == "idle" and gate.release())


# -- rendering (pure) ------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_reason", STOP_REASONS)
def test_notice_renders_the_summary_for_each_stop_reason_then_the_output(stop_reason):
    """§9.1: the first block is T-NOTICE-<stopReason>; output present → T-NOTICE-OUTPUT + its blocks;
    absent → T-NOTICE-NO-OUTPUT."""
    summary = render(f"T-NOTICE-{stop_reason}", id=CHILD)
    with_output = render_settlement_notice(CHILD, stop_reason, [text_block("line one"), text_block("line two")])
    assert texts(with_output) == [summary, TEXTS["T-NOTICE-OUTPUT"], "line one", "line two"]
    assert texts(render_settlement_notice(CHILD, stop_reason, None)) == [summary, TEXTS["T-NOTICE-NO-OUTPUT"]]
    assert all(b["type"] == "text" for b in with_output)


def test_notice_for_a_reason_outside_the_vocabulary_uses_the_other_text():
    """§9.1: T-NOTICE-other, with `{reason}` = the value, only for a value outside the vocabulary."""
    blocks = render_settlement_notice(CHILD, "exploded", [])
    assert texts(blocks) == [render("T-NOTICE-other", id=CHILD, reason="exploded"), TEXTS["T-NOTICE-NO-OUTPUT"]]


def test_notice_renders_tool_calls_as_text_and_drops_reasoning():
    """§9.1: text blocks verbatim, tool-call blocks as T-NOTICE-TOOLCALL, reasoning dropped; output
    that renders to nothing (reasoning only) reads as no output."""
    output = [
        {"type": "reasoning", "text": "private thoughts"},
        text_block("looking"),
        {"type": "tool-call", "id": "t1", "name": "grep", "arguments": '{"pattern":"x"}'},
    ]
    assert texts(render_settlement_notice(CHILD, "aborted", output)) == [
        render("T-NOTICE-aborted", id=CHILD),
        TEXTS["T-NOTICE-OUTPUT"],
        "looking",
        render("T-NOTICE-TOOLCALL", name="grep", arguments='{"pattern":"x"}'),
    ]
    only_reasoning = [{"type": "reasoning", "text": "private thoughts"}]
    assert texts(render_settlement_notice(CHILD, "completed", only_reasoning))[1:] == [TEXTS["T-NOTICE-NO-OUTPUT"]]


@pytest.mark.parametrize(
    ("child_id", "bounded"),
    [pytest.param(CHILD, False, id="short"), pytest.param("x" * 200, True, id="long")],
)
def test_notice_source_carries_data_and_a_summary_bounded_to_120_chars(child_id, bounded):
    """§9.1: source = {kind: subagent-settled, form: notice, summary, senderSessionId, stopReason};
    the summary is the summary line, or its first 119 characters + `…` when longer than 120."""
    message = settlement_message(child_id, "max-tokens", [text_block("half")])
    line = render("T-NOTICE-max-tokens", id=child_id)
    source = message["source"]
    assert source == {
        "kind": "subagent-settled", "form": "notice", "summary": source["summary"],
        "senderSessionId": child_id, "stopReason": "max-tokens",
    }
    assert message["role"] == "user" and texts(message["content"])[0] == line
    if bounded:
        assert len(line) > 120
        assert source["summary"] == line[:119] + "…" and len(source["summary"]) == 120
    else:
        assert source["summary"] == line


# -- delivery --------------------------------------------------------------------------------------


async def test_child_answer_arrives_as_exactly_one_notice_rendered_from_data(make_tree):
    """Matrix 53: a child answering `the answer` produces exactly one notice whose source names the
    sender and `stopReason: completed`, whose summary is the first block, and whose blocks are
    [T-NOTICE-completed, T-NOTICE-OUTPUT, "the answer"]."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
            "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
        }
    )
    root = await tree.create_root()
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))
    child_id = tree.provider.inner.session_of("child")

    assert len(settled_inserts(log(tree, root))) == 1
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"] == {
        "kind": "subagent-settled", "form": "notice", "summary": render("T-NOTICE-completed", id=child_id),
        "senderSessionId": child_id, "stopReason": "completed",
    }
    assert texts(notice["content"]) == [
        render("T-NOTICE-completed", id=child_id), TEXTS["T-NOTICE-OUTPUT"], "the answer"
    ]
    assert_script_consumed(tree)


async def test_child_that_reported_quietly_still_sends_exactly_one_notice(make_tree):
    """Matrix 54: a child that called `report` (quiet delivery) still settles with exactly one notice;
    the parent's next turn enters [report, notice] in one step."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
            "child": {
                "spawnedBy": "sa",
                "replies": [calls({"id": "r1", "name": "report", "arguments": {"output": "REPORT_OK"}}), text("Reported.")],
            },
        },
        report_delivery="quiet",
    )
    gate = hold(tree, "child")
    root = await tree.create_root()
    release_when_idle(root, gate)
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))

    events = log(tree, root)
    kinds = [(t, m["source"]["kind"]) for t, m in inserts(events) if m["source"]["kind"] != "user"]
    assert kinds == [("next-step", "subagent-report"), ("next-turn", "subagent-settled")]
    assert len(entered(events, "subagent-settled")) == 1
    assert [m["source"]["kind"] for m in entered(events)][-2:] == ["subagent-report", "subagent-settled"]
    assert [t["turn"] for t in events_of(events, "turn/start")] == [1, 2]
    assert_script_consumed(tree)


async def test_rejected_child_pre_step_settles_as_refusal_without_output(make_tree):
    """Matrix 55: a hook rejecting the child's pre-step ends its turn `blocked`; the notice says
    `refusal` with T-NOTICE-NO-OUTPUT."""
    tree = await make_tree({"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": []}})

    async def reject(ctx: Any) -> str:
        return "reject"

    on_agent(tree, "child", lambda agent: agent.pre_step.add(reject))
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(tree.wait_quiet(root))

    assert turn_end_kinds(log(tree, child_id)) == ["blocked"]
    assert requests_of(tree, child_id) == 0
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "refusal"
    assert texts(notice["content"]) == [render("T-NOTICE-refusal", id=child_id), TEXTS["T-NOTICE-NO-OUTPUT"]]
    assert_script_consumed(tree)


async def test_failed_checkpoint_of_turn_two_settles_as_error_with_turn_one_answer(make_tree):
    """Matrix 56: turn 1 answers; turn 2's pre-step checkpoint fails: the followup is claimed but
    never becomes a `user/message`; the notice says `error` with output `the answer`."""
    tree = await make_tree(
        {"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": [text("the answer")]}},
        batch_delay_ms=60_000,  # writes happen only at barriers, so turn 2's checkpoint has work
    )
    io = FailOnceIO()
    tree.store.io = io

    def arm_at_turn_two(agent: Agent) -> None:
        path = tree.store.path(agent.id)
        agent.events.on("agent/inbox/claimed", lambda p: p["turn"] == 2 and io.arm(path))

    on_agent(tree, "child", arm_at_turn_two)
    root = await tree.create_root()
    child_id, _ = await tree.manager.start_continuable(root, "c", "first", "c", fresh_signal())
    await tree.manager.followup(root, child_id, "second", {"kind": "user"}, fresh_signal())
    await reach(tree.wait_quiet(root))

    events = log(tree, child_id)
    assert io.failed == [tree.store.path(child_id)]
    assert [m["content"][0]["text"] for m in entered(events)] == ["first"]
    ends = events_of(events, "turn/end")
    assert [e["reason"]["kind"] for e in ends] == ["completed", "error"]
    assert ends[1]["reason"]["error"]["code"] == "CHECKPOINT_FAILED"
    assert [s["turn"] for s in events_of(events, "step/start")] == [1]
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "error"
    message = f"checkpoint of session {child_id} failed: simulated disk full"
    assert notice["source"]["error"] == {"code": "CHECKPOINT_FAILED", "message": message}
    assert texts(notice["content"]) == [
        render("T-NOTICE-error-detail", id=child_id, code="CHECKPOINT_FAILED", message=message),
        TEXTS["T-NOTICE-OUTPUT"], "the answer",
    ]
    assert_script_consumed(tree)


async def test_notice_is_sent_while_the_parent_still_owns_the_child(make_tree):
    """Matrix 57, rule "send before release_ownership" (§9.3 rule 1): parent → middle → inner; when
    inner settles, at the moment its notice is inserted into middle's inbox middle still owns it."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "middle": {"order": 1, "replies": [calls(spawn("inner")), text("WAITING"), text("GOT_INNER")]},
            "inner": {"spawnedBy": "inner", "replies": [text("INNER_DONE")]},
        }
    )
    gate = hold(tree, "inner")
    owned_at_insert: list[set[str]] = []

    def watch_middle(agent: Agent) -> None:
        release_when_idle(agent, gate)  # inner settles only once middle's turn 1 is over

        def on_inserted(payload: dict[str, Any]) -> None:
            if payload["message"]["source"]["kind"] == "subagent-settled":
                owned_at_insert.append(set(tree.manager.activations[agent.id].owned_children))

        agent.events.on("agent/inbox/inserted", on_inserted)

    on_agent(tree, "middle", watch_middle)
    root = await tree.create_root()
    middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
    await reach(tree.wait_quiet(root))

    inner_id = tree.provider.inner.session_of("inner")
    assert owned_at_insert == [{inner_id}]
    assert [m["source"]["senderSessionId"] for m in entered(log(tree, middle_id), "subagent-settled")] == [inner_id]
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "completed" and texts(notice["content"])[-1] == "GOT_INNER"
    assert_script_consumed(tree)


async def test_middle_in_maintenance_stays_resident_for_notices_and_runs_them_after(make_tree):
    """Matrix 58, rule "waking sends to a resident parent go through admit_waking" (§9.3 rule 2):
    middle is in maintenance while two inners settle in turn; middle stays resident (its `accepted`
    holds both notice ids) instead of being judged settled; after maintenance its next two turns
    enter [first] then [second]; then middle settles."""
    watched: dict[str, asyncio.Event] = {}

    class WatchedAgent(Agent):
        """Signals the first `call_when_idle` after it is armed: the middle's watcher (or a disposal
        it opened) has acted on the latest release."""

        def call_when_idle(self, fn):  # type: ignore[no-untyped-def]
            event = watched.pop(self.id, None)
            if event is not None:
                event.set()
            return super().call_when_idle(fn)

    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "middle": {"order": 1, "replies": [calls(spawn("i1"), spawn("i2")), text("WAITING"), text("NOTE1"), text("NOTE2")]},
            "i1": {"spawnedBy": "i1", "replies": [text("I1_DONE")]},
            "i2": {"spawnedBy": "i2", "replies": [text("I2_DONE")]},
        },
        agent_class=WatchedAgent,
    )
    g1, g2 = hold(tree, "i1"), hold(tree, "i2")
    root = await tree.create_root()
    edges = lifecycle(tree)
    middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
    middle = tree.registry.get(middle_id)
    a = tree.manager.activations[middle_id]
    await reach(g1.reached.wait())
    await reach(g2.reached.wait())
    await reach(middle.when_idle())
    i1_id, i2_id = tree.provider.inner.session_of("i1"), tree.provider.inner.session_of("i2")

    maintenance_over = asyncio.Event()

    async def maintenance(sig: Any) -> None:
        done = asyncio.ensure_future(maintenance_over.wait())
        try:
            await asyncio.wait({done, sig.wait()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            done.cancel()

    maintained = middle.run_maintenance(maintenance)
    for gate, inner_id in ((g1, i1_id), (g2, i2_id)):
        acted = watched[middle_id] = asyncio.Event()
        gate.release()
        await reach(edges.ended(inner_id).wait())
        await reach(acted.wait())
        assert a.disposal is None, "middle was judged settled while its notice waited behind maintenance"

    notice_ids = [m["id"] for _, m in settled_inserts(log(tree, middle))]
    assert len(notice_ids) == 2
    assert a.accepted == set(notice_ids) and a.owned_children == set()
    assert tree.manager.activations.get(middle_id) is a and middle.status == "idle"

    maintenance_over.set()
    await reach(maintained)
    await reach(tree.wait_quiet(root))

    events = log(tree, middle_id)
    by_turn: dict[int, list[str]] = {}
    turn = 0
    for e in events:
        if e["type"] == "turn/start":
            turn = e["data"]["turn"]
        elif e["type"] == "user/message":
            by_turn.setdefault(turn, []).append(e["data"]["id"])
    assert by_turn[2] == [notice_ids[0]] and by_turn[3] == [notice_ids[1]]
    assert [e["sessionId"] for e in edges.ends] == [i1_id, i2_id, middle_id]
    assert edges.end_of(middle_id)[0]["stopReason"] == "completed"
    assert_script_consumed(tree)


async def test_failing_handle_disposal_after_a_clean_answer_sends_an_error_notice(make_tree, caplog):
    """Matrix 60: the child answers cleanly but its handle disposal raises: T-LOG-TEARDOWN-FAILED is
    logged and the notice says `error` with T-NOTICE-NO-OUTPUT."""
    broken: set[str] = set()

    tree = await make_tree(
        {"root": {"replies": [text("NOTED")]}, "child": {"order": 1, "replies": [text("clean answer")]}},
        agent_class=failing_release(broken),
    )
    on_agent(tree, "child", lambda agent: broken.add(agent.id))
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(tree.wait_quiet(root))

    assert turn_end_kinds(log(tree, child_id)) == ["completed"]
    assert [(e["stopReason"], "output" in e) for e in edges.end_of(child_id)] == [("error", False)]
    [notice] = entered(log(tree, root), "subagent-settled")
    assert notice["source"]["stopReason"] == "error"
    failed = render("T-ERR-TEARDOWN", id=child_id, detail=f"handle of {child_id} broke")
    assert texts(notice["content"]) == [
        render("T-NOTICE-error-detail", id=child_id, code="ACTIVATION_TEARDOWN_FAILED", message=failed),
        TEXTS["T-NOTICE-NO-OUTPUT"],
    ]
    prefix = render("T-LOG-TEARDOWN-FAILED", id=child_id, detail="")
    assert [r.levelno for r in caplog.records if r.getMessage().startswith(prefix)] == [logging.WARNING]
    assert_script_consumed(tree)


async def test_idle_parent_gets_exactly_one_new_turn_per_notice(make_tree):
    """Matrix 61: a parent that is idle when its child settles gets the notice as a next-turn item:
    exactly one new turn and one more request."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
            "child": {"spawnedBy": "sa", "replies": [text("DONE")]},
        }
    )
    gate = hold(tree, "child")
    root = await tree.create_root()
    counts: list[tuple[int, int]] = []

    def on_idle(p: dict[str, Any]) -> None:
        if p["status"] == "idle" and not counts:
            counts.append((len(events_of(log(tree, root), "turn/start")), requests_of(tree, root.id)))
            gate.release()

    root.events.on("agent/status", on_idle)
    root.followup(user_message("go"))
    await reach(tree.wait_quiet(root))

    events = log(tree, root)
    assert counts == [(1, 2)]
    assert (len(events_of(events, "turn/start")), requests_of(tree, root.id)) == (2, 3)
    assert [t for t, _ in settled_inserts(events)] == ["next-turn"]
    assert turn_end_kinds(events) == ["completed", "completed"]
    assert_script_consumed(tree)


async def test_running_parent_held_at_pre_step_batches_two_notices_into_one_step(make_tree):
    """Matrix 62: a running parent held at a pre-step while two children settle gets two next-step
    items, no next-turn item and no new `turn/start`; one later step enters both."""
    tree = await make_tree(
        {
            "root": {"replies": [calls(spawn("c1"), spawn("c2")), text("STARTED"), text("BOTH")]},
            "c1": {"spawnedBy": "c1", "replies": [text("C1_DONE")]},
            "c2": {"spawnedBy": "c2", "replies": [text("C2_DONE")]},
        }
    )
    gate = hold(tree, "root", turn=1, step=2)
    children = [hold(tree, "c1"), hold(tree, "c2")]  # they settle only while the root is held
    root = await tree.create_root()
    root.events.on(
        "agent/inbox/inserted",
        lambda p: len(settled_inserts(log(tree, root))) == 2 and gate.release(),
    )
    root.followup(user_message("go"))
    await reach(gate.reached.wait())
    for child in children:
        await reach(child.reached.wait())
        child.release()
    await reach(tree.wait_quiet(root))

    events = log(tree, root)
    assert [t for t, _ in settled_inserts(events)] == ["next-step", "next-step"]
    assert len(events_of(events, "turn/start")) == 1
    assert gate.ctx is not None and gate.ctx.claimed == []
    step_of: dict[str, int] = {}
    step = 0
    for e in events:
        if e["type"] == "step/start":
            step = e["data"]["step"]
        elif e["type"] == "user/message" and e["data"]["source"]["kind"] == "subagent-settled":
            step_of[e["data"]["source"]["senderSessionId"]] = step
    assert sorted(step_of.values()) == [3, 3]
    assert turn_end_kinds(events) == ["completed"]
    assert_script_consumed(tree)


async def test_parent_disposed_while_child_finishes_drops_the_notice_silently(make_tree, caplog):
    """Matrix 64: the parent is disposed while its child is still working; the child settles with
    one `subagent/end`, the notice is dropped (parent not registered) and nothing is logged as a
    warning."""
    caplog.set_level(logging.WARNING)
    tree = await make_tree({"root": {"replies": []}, "child": {"order": 1, "replies": [text("DONE")]}})
    gate = hold(tree, "child")
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(gate.reached.wait())
    await reach(root.dispose())

    gate.release()
    await reach(edges.ended(child_id).wait())

    assert [e["stopReason"] for e in edges.end_of(child_id)] == ["completed"]
    assert tree.manager.activations == {}
    assert settled_inserts(log(tree, root)) == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert_script_consumed(tree)


async def test_parent_followup_raising_is_logged_and_the_child_still_settles(make_tree, caplog):
    """Matrix 65: `parent.followup` raises for the notice: the child still settles `completed`
    (its edge is emitted, its Activation removed) and T-LOG-NOTICE-FAILED is logged."""

    class RefusingParent(Agent):
        def followup(self, message: dict[str, Any]) -> str:
            if message["source"]["kind"] == "subagent-settled":
                raise RuntimeError("parent inbox refused")
            return super().followup(message)

    tree = await make_tree(
        {"root": {"replies": []}, "child": {"order": 1, "replies": [text("DONE")]}}, agent_class=RefusingParent
    )
    root = await tree.create_root()
    edges = lifecycle(tree)
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(edges.ended(child_id).wait())

    assert [e["stopReason"] for e in edges.end_of(child_id)] == ["completed"]
    assert tree.manager.activations == {} and child_id not in tree.registry
    assert settled_inserts(log(tree, root)) == [] and root.status == "idle"
    prefix = render("T-LOG-NOTICE-FAILED", id=child_id, detail="parent inbox refused")
    assert [r.levelno for r in caplog.records if r.getMessage() == prefix] == [logging.WARNING]
    assert_script_consumed(tree)


async def test_notice_to_a_parent_whose_own_disposal_is_open_is_injected(make_tree):
    """Matrix 67 (§24 item 3): during a selected drain of the middle its inner settles; the notice is
    injected into the middle (next-step insert), never wakes it, and the middle's own disposal keeps
    it pending for the middle's next residency (issue 9 item 4: no longer cancelled unread)."""
    tree = await make_tree(
        {
            "root": {"replies": [text("NOTED")]},
            "middle": {"order": 1, "replies": [calls(spawn("inner")), text("WAITING")]},
            "inner": {"spawnedBy": "inner", "replies": []},
        }
    )
    gate = hold(tree, "inner")
    root = await tree.create_root()
    middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
    middle = tree.registry.get(middle_id)
    await reach(gate.reached.wait())
    await reach(middle.when_idle())
    inner_id = tree.provider.inner.session_of("inner")
    statuses: list[str] = []
    middle.events.on("agent/status", lambda p: statuses.append(p["status"]))

    await reach(drain_children(tree.manager, root, [middle_id]))

    events = log(tree, middle_id)
    notices = settled_inserts(events)
    assert [(t, m["source"]["senderSessionId"], m["source"]["stopReason"]) for t, m in notices] == [
        ("next-step", inner_id, "aborted")
    ]
    types = [e["type"] for e in events]
    insert_at = next(
        i for i, e in enumerate(events)
        if e["type"] == "agent/inbox/spliced" and e["data"]["inserted"]
        and e["data"]["inserted"][0]["source"]["kind"] == "subagent-settled"
    )
    assert "turn/start" not in types[insert_at:] and statuses == []
    after = [e["data"] for e in events[insert_at + 1:] if e["type"] == "agent/inbox/spliced"]
    assert after == []
    await reach(tree.wait_quiet(root))
    assert [m["source"]["senderSessionId"] for m in entered(log(tree, root), "subagent-settled")] == [middle_id]
    assert_script_consumed(tree)


def test_notice_id_is_the_uuid5_of_child_and_epoch() -> None:
    """A notice's id must stay the uuid5 of `child/epoch` in the fixed namespace: a resumed process
    recomputes it to find the notice an older process wrote (epochs.py), so the format is durable."""
    import uuid

    from dsh.loader.subagents.epochs import _NOTICE_NAMESPACE, notice_id

    for child, epoch in [("a1b2c3d4e5f60718", 1), ("ffffffffffffffff", 12), ("ünï", 3), ("", 0)]:
        assert notice_id(child, epoch) == str(uuid.uuid5(_NOTICE_NAMESPACE, f"{child}/{epoch}"))
    assert notice_id("a1b2c3d4e5f60718", 1) != notice_id("a1b2c3d4e5f60718", 2)
