"""Report (SPEC §11, matrix 77–83): a child-authored message that crosses exactly one edge.

`wakeup` steers into the parent (through `admit_waking` for a resident parent), `quiet` injects and
waits for another waking input. A report never ends the child's turn and reaches the parent before
that child's later settlement notice. Children are held at pre-step so they stay resident while the
test reports on their behalf through `report_from`; the `report` tool path is covered too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh.loader.abort import AbortController, Aborted
from dsh.loader.agent import Agent, user_message
from dsh.loader.errors import ConfigError, SubagentError
from dsh.loader.subagents import ManagerConfig, drain_children, drain_descendants, report_from
from dsh.loader.texts import TEXTS, render
from tree_kit import (
    build,
    fresh_signal,
    RecordingAgent,
    TreeWatch,
    call,
    calls,
    events_of,
    inserts,
    maintenance_until,
    reach,
    result_text,
    source_kinds,
    spawn,
    step_batches,
    text,
    texts,
    tool_results,
    turn_ends,
    entered,
)


ONE_CHILD = {
    "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("GOT REPORT"), text("NOTED")]},
    "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
}


async def _idle_root_with_held_child(make_tree: Any, **kw: Any) -> tuple[Any, TreeWatch, Agent, Agent, Any]:
    tree, watch, root = await build(make_tree, ONE_CHILD, **kw)
    held = watch.hold("child")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.idle_after_run("root"))
    return tree, watch, root, watch.agents["child"], held


async def test_wakeup_report_to_an_idle_root_starts_a_turn(make_tree):
    """Matrix 77: the report starts a root turn before `report_from` returns; the inserted id is the
    returned id; the content is T-REPORT-RELAY then the output, with a relay source."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    turns_before = len(events_of(root, "turn/start"))

    message_id = report_from(tree.manager, child, "the result", fresh_signal())

    assert root.status == "running"
    assert len(events_of(root, "turn/start")) == turns_before + 1
    target, message = inserts(root)[-1]
    assert (target, message["id"]) == ("next-step", message_id)
    assert texts(message) == [render("T-REPORT-RELAY", id=child.id), "the result"]
    assert message["source"] == {"kind": "subagent-report", "form": "relay", "senderSessionId": child.id}
    await reach(root.when_idle())
    assert entered(root)[-1]["id"] == message_id
    assert child.status == "running"  # the report did not touch the child's turn

    held.release()
    await tree.wait_quiet(root)
    assert source_kinds(entered(root))[-2:] == ["subagent-report", "subagent-settled"]


async def test_quiet_report_waits_in_next_step_without_a_turn(make_tree):
    """Matrix 78: `quiet` injects: one next-step item, root stays idle, no turn, no request."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree, report_delivery="quiet")
    turns_before = len(events_of(root, "turn/start"))
    requests_before = len(tree.provider.requests)

    message_id = report_from(tree.manager, child, "the result", fresh_signal())

    assert [m["id"] for m in root.inbox.next_step] == [message_id]
    assert root.inbox.next_turn == []
    await reach(root.when_idle())
    assert root.status == "idle"
    assert len(events_of(root, "turn/start")) == turns_before
    assert len(tree.provider.requests) == requests_before


async def test_two_wakeup_reports_to_a_running_root_share_one_step(make_tree):
    """Matrix 79: reports accepted while the root runs enter one step as `[FIRST, SECOND]`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STEP 2"), text("GOT BOTH"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
    })
    root_held = watch.hold("root", turn=1, step=2)
    child_held = watch.hold("child")
    root.followup(user_message("go"))
    await reach(root_held.reached)
    await reach(child_held.reached)
    child = watch.agents["child"]

    first = report_from(tree.manager, child, "FIRST", fresh_signal())
    second = report_from(tree.manager, child, "SECOND", fresh_signal())
    assert [m["id"] for m in root.inbox.next_step] == [first, second]

    root_held.release()
    await reach(watch.idle_after_run("root"))
    entered = {(turn, step): [(m["id"], texts(m)[-1]) for m in msgs] for turn, step, msgs in step_batches(root)}
    assert entered[(1, 2)] == []
    assert entered[(1, 3)] == [(first, "FIRST"), (second, "SECOND")]
    assert len(events_of(root, "turn/start")) == 1
    child_held.release()
    await tree.wait_quiet(root)


async def test_report_then_settlement_queue_in_that_order_behind_a_running_root(make_tree):
    """Matrix 80: a report tool call, then the child's settlement, land in next-step as
    `[subagent-report, subagent-settled]`; next-turn stays empty; both enter one step."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STEP 2"), text("GOT BOTH")]},
        "child": {"spawnedBy": "sa", "replies": [calls(call("rp", "report", output="R")), text("the answer")]},
    })
    root_held = watch.hold("root", turn=1, step=2)
    root.followup(user_message("go"))
    await reach(root_held.reached)
    await reach(watch.ended("child"))

    assert source_kinds(root.inbox.next_step) == ["subagent-report", "subagent-settled"]
    assert root.inbox.next_turn == []
    report, notice = root.inbox.next_step
    assert texts(report)[1] == "R" and notice["source"]["stopReason"] == "completed"
    child = watch.agents["child"]
    result = tool_results(child)["rp"]
    assert result["value"] == {"messageId": report["id"]}
    assert result_text(result) == render("T-REPORT-OK", messageId=report["id"])

    root_held.release()
    await tree.wait_quiet(root)
    assert step_batches(root)[-1][:2] == (1, 3)
    assert source_kinds(step_batches(root)[-1][2]) == ["subagent-report", "subagent-settled"]
    assert len(events_of(root, "turn/start")) == 1


async def test_report_and_notice_to_a_maintaining_root_enter_one_step_after_maintenance(make_tree):
    """Matrix 81: during maintenance a `wakeup` report (next-step) and the notice (next-turn) both
    latch; after maintenance the first step enters `[report, notice]`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("BOTH")]},
        "child": {"spawnedBy": "sa", "replies": [text("the answer")]},
    })
    held = watch.hold("child")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.idle_after_run("root"))
    child = watch.agents["child"]

    finish = asyncio.Event()
    done = root.run_maintenance(maintenance_until(finish))
    report_id = report_from(tree.manager, child, "R", fresh_signal())
    held.release()
    await reach(watch.ended("child"))
    assert [m["id"] for m in root.inbox.next_step] == [report_id]
    assert source_kinds(root.inbox.next_turn) == ["subagent-settled"]
    assert root.phase.wake_requested is True
    assert len(events_of(root, "turn/start")) == 1

    finish.set()
    await reach(done)
    await tree.wait_quiet(root)
    turn, step, entered = step_batches(root)[-1]
    assert (turn, step) == (2, 1)
    assert [m["id"] for m in entered][0] == report_id
    assert source_kinds(entered) == ["subagent-report", "subagent-settled"]
    assert turn_ends(root)[-1] == {"kind": "completed"}


async def test_a_wakeup_report_to_a_maintaining_resident_parent_goes_through_admit_waking(make_tree):
    """§11.1 / §9.3 rule 2: a report to a resident middle parent in maintenance is recorded in its
    Activation's `accepted` before the latched steer, so the middle stays resident and runs
    `[report, notice]` in one step once maintenance ends."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED"), text("NOTED")]},
        "middle": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), text("M STARTED"), text("M GOT BOTH")]},
        "inner": {"spawnedBy": "sb", "replies": [text("inner answer")]},
    })
    held = watch.hold("inner")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.idle_after_run("middle"))
    middle, inner = watch.agents["middle"], watch.agents["inner"]
    ma = tree.manager.activations[middle.id]

    finish = asyncio.Event()
    done = middle.run_maintenance(maintenance_until(finish))
    report_id = report_from(tree.manager, inner, "R", fresh_signal())
    assert report_id in ma.accepted
    assert [m["id"] for m in middle.inbox.next_step] == [report_id]

    held.release()
    await reach(watch.ended("inner"))
    assert ma.owned_children == set() and tree.manager.activations.get(middle.id) is ma
    assert ma.disposal is None

    finish.set()
    await reach(done)
    await tree.wait_quiet(root)
    turn, step, entered = step_batches(middle)[-1]
    assert (turn, step) == (2, 1)
    assert [m["id"] for m in entered][0] == report_id
    assert source_kinds(entered) == ["subagent-report", "subagent-settled"]


async def test_a_report_with_an_aborted_signal_is_refused_before_anything_is_sent(make_tree):
    """§11.2 step 1: the abort check comes first; the parent's inbox is untouched."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    controller = AbortController()
    controller.abort({"kind": "user"})
    inserts_before = len(inserts(root))
    with pytest.raises(Aborted):
        report_from(tree.manager, child, "x", controller.signal)
    assert len(inserts(root)) == inserts_before and root.status == "idle"


async def test_the_root_cannot_report(make_tree):
    """Matrix 82: root sender — `UNAUTHORIZED` T-ERR-NOT-REPORTER."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, root, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("UNAUTHORIZED", TEXTS["T-ERR-NOT-REPORTER"])


async def test_a_stale_child_object_cannot_report(make_tree):
    """Matrix 82: sender check — only the agent the Activation holds may report, not another object
    for the same session id."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    stale = RecordingAgent(child.session, store=tree.store, provider=tree.provider, registry=tree.registry)
    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, stale, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("UNAUTHORIZED", TEXTS["T-ERR-NOT-REPORTER"])
    assert root.inbox.next_step == [] and root.status == "idle"


async def test_a_report_to_a_parent_that_is_gone_is_parent_unavailable(make_tree):
    """Matrix 82: parent gone — the root is disposed while its child is resident."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    await root.dispose()
    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, child, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("PARENT_UNAVAILABLE", TEXTS["T-ERR-PARENT-GONE"])
    assert info.value.__cause__ is None  # refused by the lookup, not by a failed send


async def test_a_report_from_a_child_whose_disposal_is_open_is_activation_closing(make_tree):
    """§11.2 step 3: a selected drain of the child opens its disposal while the parent keeps
    admitting; the report is `ACTIVATION_CLOSING` T-ERR-CLOSING-REPORT and nothing reaches the root."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    a = tree.manager.activations[child.id]
    drain = asyncio.ensure_future(drain_children(tree.manager, root, [child.id]))
    opened = asyncio.Event()
    tree.manager.events.on("changed", lambda _p: opened.set() if a.disposal is not None else None)
    await reach(opened)
    inserts_before = len(inserts(root))
    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, child, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("ACTIVATION_CLOSING", TEXTS["T-ERR-CLOSING-REPORT"])
    assert len(inserts(root)) == inserts_before
    await reach(drain)


async def test_a_report_whose_send_raises_is_parent_unavailable_and_leaves_no_accepted_id(make_tree):
    """Matrix 82: parent send raises — a resident middle parent refuses the steer; the error is
    `PARENT_UNAVAILABLE` with the cause attached, and `admit_waking` has discarded the id."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "middle": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), text("M STARTED")]},
        "inner": {"spawnedBy": "sb", "replies": [text("inner answer")]},
    })
    held = watch.hold("inner")
    root.followup(user_message("go"))
    await reach(held.reached)
    await reach(watch.idle_after_run("middle"))
    middle, inner = watch.agents["middle"], watch.agents["inner"]
    ma = tree.manager.activations[middle.id]
    assert ma.accepted == set()
    boom = RuntimeError("inbox refused")
    middle.fail_sends = boom  # type: ignore[attr-defined]

    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, inner, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("PARENT_UNAVAILABLE", TEXTS["T-ERR-PARENT-GONE"])
    assert info.value.__cause__ is boom
    assert ma.accepted == set()
    middle.fail_sends = None  # type: ignore[attr-defined]


async def test_a_report_from_a_draining_lineage_is_refused(make_tree):
    """Matrix 82: lineage draining — `DRAINING` (scoped to the root) once a scoped drain began."""
    tree, watch, root, child, held = await _idle_root_with_held_child(make_tree)
    drain = asyncio.ensure_future(drain_descendants(tree.manager, [root]))
    opened = asyncio.Event()
    tree.manager.events.on("changed", lambda _p: opened.set() if tree.manager.closing_scopes else None)
    await reach(opened)
    with pytest.raises(SubagentError) as info:
        report_from(tree.manager, child, "x", fresh_signal())
    assert (info.value.code, info.value.message) == ("DRAINING", render("T-ERR-DRAINING-SCOPED", root=root.id))
    await reach(drain)


async def test_one_shot_children_have_no_report_tool(make_tree):
    """Matrix 82: one-shot — the one-shot child's requests carry no tools at all, so no `report`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("so", run_in_background=False)), text("DONE")]},
        "once": {"spawnedBy": "so", "replies": [text("one-shot answer")]},
    })
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    [request] = watch.requests_of("once")
    assert request.tools == []
    assert tool_results(root)["so"]["value"]["kind"] == "foreground"


@pytest.mark.parametrize("value", [
    pytest.param("next-step", id="m83-next-step"),
    pytest.param("Wakeup", id="m83-wrong-case"),
])
def test_an_unknown_report_delivery_is_a_configuration_error(value):
    """Matrix 83: validation part — only `wakeup` and `quiet` are accepted; anything else is a
    `ConfigError` naming `subagents.reportDelivery`. (File and line come with config loading.)"""
    with pytest.raises(ConfigError) as info:
        ManagerConfig(report_delivery=value)  # type: ignore[arg-type]
    assert "subagents.reportDelivery" in info.value.message
    assert value in info.value.message


@pytest.mark.parametrize("value", ["wakeup", "quiet"])
def test_the_two_report_delivery_modes_are_accepted(value):
    assert ManagerConfig(report_delivery=value).report_delivery == value
