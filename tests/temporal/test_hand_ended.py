"""A child's run ended by hand with a child of its own resident (issue 12 "Not yet" item 0;
loader/engines/README.md "Failed child runs"): cancelled (`temporal workflow cancel`,
`handle.cancel()`) or terminated. Either way no workflow of the tree is left running, each notice
enters its direct parent's log once, and the logs end as a disposal ends them.

The tree: root starts c, c starts g, g hangs in its first request; c's first turn ends and c waits
on g. Once g's hang is reached the test cancels (or terminates) c's workflow. With `continued`,
every agent continues as new after each turn with work ahead (`temporal.continueAsNewAfter: 1`),
and c is terminated only once the root and c have: the root's current run holds no handle to c.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import assert_nothing_running, backstopped, client, replays_and_kept  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.models import ReplayProvider
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0


def script(tmp_path: Path, *, c_hangs: bool = False) -> Path:
    """`c_hangs`: c's turn, after starting g, hangs too (the cancel reaches a running turn)."""
    root = [{"toolCalls": [{"id": "r1", "name": "subagent", "arguments": {"label": "c", "prompt": "Start g."}}]},
            {"text": "STARTED"},
            {"text": "DONE"}]
    c = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "g", "prompt": "Work."}}]},
         {"hang": {}} if c_hangs else {"text": "C_STARTED"}]
    path = tmp_path / "hand-ended.json"
    path.write_text(json.dumps({"version": 1, "name": "hand-ended", "task": "Start c.", "agents": {
        "root": {"replies": root}, "c": {"spawnedBy": "r1", "replies": c},
        "g": {"spawnedBy": "c1", "replies": [{"hang": {}}]}}}))
    return path


async def run_and_end_c(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str,
                        *, c_hangs: bool = False, continued: bool = False) -> tuple[RunResult, Path]:
    """Run the tree; once g's hang is reached (an event) and c's first turn has ended (or, with
    `c_hangs`, c's hang is reached too; with `continued`, the root and c have continued as new),
    end c's workflow by hand (`cancel` or `terminate`)."""
    hanging = hangs_reached(monkeypatch, 2 if c_hangs else 1)
    plan = plan_flow(script(tmp_path, c_hangs=c_hangs))
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    started: list[str] = []
    config = backstopped(plan.config)
    if continued:
        config = config.model_copy(update={"temporal": config.temporal.model_copy(update={"continue_as_new_after": 1})})
    request = RunRequest(home=home, config=config, transcript=plan.script, fences_allowed=True)
    request.sinks.on_started = started.append

    async def end_c() -> None:
        await asyncio.wait_for(hanging.wait(), BACKSTOP)
        root = started[0]
        c = next(i for i in ids(home) if label(home, i) == "c")
        handle = client.get_workflow_handle(f"{root}/{c}")
        if continued:
            # c continues as new only after its first turn (with g resident), so it is idle then.
            await has_continued(client, root)
            await has_continued(client, f"{root}/{c}")
        elif not c_hangs:
            await turn_taken(handle)
        await (handle.cancel() if how == "cancel" else handle.terminate("by hand"))

    async with make_worker(client, queue):
        ender = asyncio.ensure_future(end_c())
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client), BACKSTOP)
        await ender
    return result, home


def hangs_reached(monkeypatch: pytest.MonkeyPatch, count: int) -> asyncio.Event:
    """Set once `count` hanging requests have been reached in this process (a local run, or the
    in-process worker)."""
    reached: list[str] = []
    hanging = asyncio.Event()
    real_reach = ReplayProvider._reach_hang

    def reach(self: ReplayProvider, key: str) -> None:
        real_reach(self, key)
        reached.append(key)
        if len(reached) == count:
            hanging.set()

    monkeypatch.setattr(ReplayProvider, "_reach_hang", reach)
    return hanging


async def turn_taken(handle: Any) -> None:
    """c's workflow has taken its first turn's result: the server's history long-poll shows the
    turn activity completed and then a workflow task completed (c is idle, waiting on g)."""
    completed = False
    async for event in handle.fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed = True
        elif completed and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            return


async def has_continued(client: Client, workflow_id: str) -> None:
    """The workflow's first run has continued as new: its current run is another, or the first
    run's history (a long-poll) reaches its continued-as-new event."""
    info = (await client.get_workflow_handle(workflow_id).describe()).raw_description.workflow_execution_info
    first = info.first_run_id
    if info.execution.run_id != first:
        return
    async for event in client.get_workflow_handle(workflow_id, run_id=first).fetch_history_events(wait_new_event=True):
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            return
    raise AssertionError(f"{workflow_id}'s first run closed without continuing as new")


def ids(home: Path) -> list[str]:
    return [p.parent.name for p in (home / "sessions").glob("*/session.jsonl")]


def label(home: Path, session_id: str) -> str | None:
    events = SessionStore(home).read(session_id).events
    return next((e["data"].get("label") for e in events if e["type"] == "subagent/descriptor"), None)


def notices_in(home: Path, session_id: str) -> list[tuple[str | None, str, str]]:
    """(sender's label, stop reason, lane) of each notice the log holds."""
    return [(label(home, m["source"]["senderSessionId"]), m["source"]["stopReason"], e["data"]["target"])
            for e in SessionStore(home).read(session_id).events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]


def turn_ends(home: Path, session_id: str) -> list[Any]:
    return [e["data"]["reason"] for e in SessionStore(home).read(session_id).events if e["type"] == "turn/end"]


async def test_a_child_cancelled_by_hand_disposes_its_children_first_and_settles_its_parent_once(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, home = await run_and_end_c(client, tmp_path, monkeypatch, "cancel")
    assert (result.stop_reason, result.output) == ("completed", "DONE")
    root = result.root_session_id
    [c] = [i for i in ids(home) if label(home, i) == "c"]
    [g] = [i for i in ids(home) if label(home, i) == "g"]
    # g was disposed as a drain disposes it: its hanging turn aborted by the parent's cancel.
    assert turn_ends(home, g) == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    # g's notice entered c once (an inject: c was closing), c's entered the root once and woke it.
    assert notices_in(home, c) == [("g", "aborted", "next-step")]
    assert [(n[0], n[1]) for n in notices_in(home, root)] == [("c", "completed")]
    assert [e["kind"] for e in turn_ends(home, root)] == ["completed", "completed"]
    await replays_and_kept(client, f"{root}/{c}", "cancelled-child.1.json")  # c's run: the cancel, the release
    await assert_nothing_running(client, root)


async def test_a_child_cancelled_by_hand_mid_turn_ends_that_turn_in_its_log_and_settles_its_parent_once(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cancel reaches c's running turn as its parent's interrupt (the turn is shielded from
    the cancel, so its activity is not cut off mid-write): the turn ends `aborted` {parent}."""
    result, home = await run_and_end_c(client, tmp_path, monkeypatch, "cancel", c_hangs=True)
    assert (result.stop_reason, result.output) == ("completed", "DONE")
    root = result.root_session_id
    [c] = [i for i in ids(home) if label(home, i) == "c"]
    [g] = [i for i in ids(home) if label(home, i) == "g"]
    assert turn_ends(home, g) == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    assert turn_ends(home, c) == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    assert notices_in(home, c) == [("g", "aborted", "next-step")]
    assert [(n[0], n[1]) for n in notices_in(home, root)] == [("c", "aborted")]
    await assert_nothing_running(client, root)


def terminated_c_drained(home: Path, result: RunResult) -> tuple[str, str, str]:
    """What a terminated c leaves, however its parent heard of it: g released (`aborted
    {parent}`) with its notice in c's log, and c's error end (`ENGINE_RUN_FAILED`) after its first
    turn. Returns the ids of the root, c and g."""
    root = result.root_session_id
    [c] = [i for i in ids(home) if label(home, i) == "c"]
    [g] = [i for i in ids(home) if label(home, i) == "g"]
    assert turn_ends(home, g) == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    assert [e["kind"] for e in turn_ends(home, c)] == ["completed", "error"]
    assert turn_ends(home, c)[-1]["error"]["code"] == "ENGINE_RUN_FAILED"
    assert notices_in(home, c) == [("g", "aborted", "next-step")]
    return root, c, g


async def test_a_child_terminated_by_hand_is_settled_by_its_parent_and_its_child_drained_into_its_log(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No code runs in a terminated run: the root's run holds c's handle and gets the failure, so
    it settles c (`dsh.settle_failed`: the error end in c's log, the `error` notice) and releases
    the children c's log names; g, released, finds no running run of c and enters its notice
    into c's log (as c's local teardown would have injected it). Before, g hung on, its workflow
    running, and its notice was lost."""
    result, home = await run_and_end_c(client, tmp_path, monkeypatch, "terminate")
    assert (result.stop_reason, result.output) == ("completed", "DONE")
    root, c, g = terminated_c_drained(home, result)
    events = SessionStore(home).read(c).events
    assert events[-1]["type"] == "agent/inbox/spliced"  # after c's error end, unread
    assert [(n[0], n[1]) for n in notices_in(home, root)] == [("c", "error")]
    await replays_and_kept(client, root, "terminated-child.0.json")  # the root: c's failure, g's release
    await replays_and_kept(client, f"{root}/{g}", "terminated-child.2.json")  # g: its notice into c's log
    await assert_nothing_running(client, root)


async def test_a_child_terminated_by_hand_after_its_parent_continued_as_new_is_heard_by_the_parents_current_run(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root's current run holds no handle to c (the run that started c continued as new), so
    no `ChildWorkflowError` reaches it: its watcher (`dsh.first_closed`, WATCH_PATCH) answers c,
    closed terminated with no notice, and the run settles c as a terminated child with a handle
    is settled (`dsh.settle_failed`, g released into c's log). Before, the root waited for c's
    notice forever (the backstop)."""
    result, home = await run_and_end_c(client, tmp_path, monkeypatch, "terminate", continued=True)
    assert (result.stop_reason, result.output) == ("completed", "DONE")
    root, c, g = terminated_c_drained(home, result)
    # c's `error` notice entered the root once, and woke its second (last) turn.
    assert [(n[0], n[1]) for n in notices_in(home, root)] == [("c", "error")]
    assert [e["kind"] for e in turn_ends(home, root)] == ["completed", "completed"]
    # The run that settled c is a later run of the root than the one that started c.
    description = (await client.get_workflow_handle(root).describe()).raw_description.workflow_execution_info
    assert description.execution.run_id != description.first_run_id
    await replays_and_kept(client, root, "terminated-handleless-child.0.json")  # the root's last run: the watcher
    await assert_nothing_running(client, root)
