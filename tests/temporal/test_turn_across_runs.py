"""One turn outlives its agent's workflow run (loader/engines/README.md "A turn across runs"):
a turn activity belongs to the run that scheduled it, so one long root turn (a fan-out of
thousands held for their notices, or the tree's model requests charged to the root meanwhile)
met the run's 51,200 events. The root's turn now runs in a workflow of its own (`dsh.turn_run`,
`temporal.turnWorkflows: root`), and the root's run continues as new mid-turn once the turn said
its log holds what it took.

Here the runs' limit is `LIMIT` events (`temporal.continueAsNewAfter`) and one root turn holds
`FAN_OUT` children's notices in its second step, about 8 root events each: the local engine's
flow, every notice once, and the root's history spread over several runs that each carry the
running turn (`carried.turn`), none holding the whole turn.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
from temporal_kit import dev_server, replays_and_kept, run_histories, settlement_facts
from temporalio.client import Client, WorkflowHistory
from temporalio.service import RPCError
from test_root_continue import fan_out, root_notices, runs_of, turns_in_log
from test_tree_budget import both

from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.headless import RunRequest
from dsh.loader.session import SessionStore
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAVES, SIZE = 5, 10  # one root turn starting SIZE children per step, held for their notices
LIMIT = 100  # events per root run: the one turn needs ~10 per child, so it spans several runs
BACKSTOP = 180.0  # a loud failure, never an ordering


def waves(count: int, size: int) -> str:
    """One root turn of `count` steps, each starting `size` children and held until every notice
    so far has been steered in, so children start and settle all along the turn."""
    replies: list[dict[str, Any]] = []
    agents: dict[str, Any] = {}
    fences: list[dict[str, Any]] = []
    for w in range(count):
        ids = range(w * size + 1, (w + 1) * size + 1)
        replies.append({"toolCalls": [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"W{i}."}}
                                      for i in ids]})
        agents.update({f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]} for i in ids})
        fences.append({"hold": {"agent": "root", "turn": 1, "step": w + 2, "until": {
            "inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": (w + 1) * size}}}})
    agents["root"] = {"replies": [*replies, {"text": "HELD"}, {"text": "ALL_RECEIVED"}]}  # (as fan_out)
    return json.dumps({"version": 1, "name": f"waves-{count}x{size}", "task": "Fan out in waves.", "fences": fences,
                       "agents": agents})


def run_id_of(history: WorkflowHistory) -> str:
    return history.events[0].workflow_execution_started_event_attributes.original_execution_run_id


async def test_one_root_turn_spans_several_runs_and_loses_nothing(tmp_path: Path) -> None:
    temporal: dict[str, Any] = {"continue_as_new_after": LIMIT, "turn_workflows": "root"}
    async with dev_server() as client:
        runs = await asyncio.wait_for(both(client, tmp_path, waves(WAVES, SIZE), {}, temporal=temporal), BACKSTOP)
        (local, local_flow), (remote, remote_flow) = runs
        root = remote.root_session_id
        inputs = await runs_of(client, root)
        histories = await run_histories(client, root)
        # Committed for the Replayer (test_replay.py): a root run that began mid-turn and moved
        # again, and the turn's own workflow.
        await replays_and_kept(client, root, "turn-across-runs.0.json", run_id=run_id_of(histories[1]))
        turn_id = next(e.start_child_workflow_execution_initiated_event_attributes.workflow_id
                       for e in histories[0].events if e.HasField("start_child_workflow_execution_initiated_event_attributes")
                       and e.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == "dsh.turn_run")
        await replays_and_kept(client, turn_id, "turn-across-runs.turn.json")
    lengths = [len(h.events) for h in histories]
    assert (local.stop_reason, local.output, local.violations, local.exit_code) == ("completed", "ALL_RECEIVED", [], 0), local.violations
    assert (remote.stop_reason, remote.output, remote.violations, remote.exit_code) == ("completed", "ALL_RECEIVED", [], 0), remote.violations
    local_facts, remote_facts = settlement_facts(local_flow), settlement_facts(remote_flow)
    assert remote_facts["turn_ends"] == local_facts["turn_ends"] and remote_facts["result"] == local_facts["result"]
    # Every notice once, all steered into the one turn (their order within a wave is the
    # settlement race on either engine).
    notices = root_notices(tmp_path / "temporal", root)
    assert sorted(notices) == sorted(s["sessionId"] for s in remote.subagents) and len(notices) == WAVES * SIZE
    assert turns_in_log(tmp_path / "temporal", root) == 1 == turns_in_log(tmp_path / "local", local.root_session_id)
    # The one turn was carried by runs after the first: each took it up where the last left it.
    moved = [i["carried"]["turn"] for i in inputs[1:] if (i.get("carried") or {}).get("turn")]
    assert len(moved) >= 2, lengths
    assert {t["seq"] for t in moved} == {0} and [t["base"] for t in moved] == sorted(t["base"] for t in moved)
    assert sum(lengths) > 2 * max(lengths), lengths  # no run held the whole turn


async def test_turn_workflows_none_keeps_the_turn_in_one_run(tmp_path: Path) -> None:
    """`temporal.turnWorkflows: none`: the turn is the run's activity, as before, and the run
    cannot continue as new until it ends (the same flow; no `dsh.turn_run` workflow)."""
    temporal: dict[str, Any] = {"continue_as_new_after": LIMIT, "turn_workflows": "none"}
    async with dev_server() as client:
        runs = await asyncio.wait_for(both(client, tmp_path, fan_out(8), {}, temporal=temporal), BACKSTOP)
        (_, local_flow), (remote, remote_flow) = runs
        inputs = await runs_of(client, remote.root_session_id)
        history = await client.get_workflow_handle(remote.root_session_id).fetch_history()
    local_facts, remote_facts = settlement_facts(local_flow), settlement_facts(remote_flow)
    assert remote_facts["turn_ends"] == local_facts["turn_ends"] and remote.output == "ALL_RECEIVED"
    # The one turn in the first run, as its activity; no run carried a turn (one may follow it
    # between turns, continuing as new after LIMIT events).
    assert inputs[0]["turns"] == 1 and sum(i["turns"] for i in inputs) == 1
    assert not any((i.get("carried") or {}).get("turn") for i in inputs)
    activities = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                  if e.HasField("activity_task_scheduled_event_attributes")]
    assert activities.count("dsh.turn") == 1 and not any(
        e.HasField("start_child_workflow_execution_initiated_event_attributes")
        and e.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == "dsh.turn_run"
        for e in history.events)



KILL_FAN_OUT = 30
HEARTBEAT = 2.0  # a dead worker's turn is retried in seconds


def held_fan_out(n: int) -> str:
    """Root turn 1 starts n children and its step 2 is held until its inbox accepted the task, the n
    notices and one more message: only a retried turn sends one (the continuation of the turn the
    kill cut off, turn.py), so the turn is held until the fault lands; the continuation (turn 2)
    takes the next reply, with every notice (the kill comes once the turn has taken them all). The first hold engages only in the attempt the kill cut off, whose
    result never returns, so the tree reports it unused (FENCE_UNUSED)."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"W{i}."}}
             for i in range(1, n + 1)]
    agents: dict[str, Any] = {"root": {"replies": [{"toolCalls": calls}, {"text": "NOTED"}]}}
    agents.update({f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]} for i in range(1, n + 1)})
    fences = [{"hold": {"agent": "root", "turn": 1, "step": 2, "until": {"inboxAccepted": {"agent": "root", "count": n + 2}}}}]
    return json.dumps({"version": 1, "name": f"held-fan-out-{n}", "task": "Fan out.", "fences": fences, "agents": agents})


async def first_event(client: Client, workflow_id: str, run_id: str, wanted: Callable[[Any], bool]) -> Any:
    """The first event of that run for which `wanted` holds (its history, long-polled; read again
    from the start when the server refuses a page while the run closes: its branch changed)."""
    while True:
        try:
            async for event in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events(
                    wait_new_event=True):
                if wanted(event):
                    return event
        except RPCError as exc:
            if "branch token" not in exc.message:
                raise


async def continued_as_new(client: Client, workflow_id: str, run_id: str) -> None:
    """That run of the workflow continued as new."""
    await first_event(client, workflow_id, run_id, lambda e: e.HasField("workflow_execution_continued_as_new_event_attributes"))


async def took(client: Client, root: str, run_id: str, count: int) -> None:
    """The root's running turn has taken `count` deliveries: one of its polls asks past them (an
    update in some run's history, followed across the runs' continue-as-new chain). A replay
    turn writes what it takes at once, so they are in its log."""
    def past(event: Any) -> bool:
        if event.HasField("workflow_execution_update_accepted_event_attributes"):
            request = event.workflow_execution_update_accepted_event_attributes.accepted_request.input
            return request.name == "deliveries_after" and json.loads(request.args.payloads[0].data)["after"] >= count
        return event.HasField("workflow_execution_continued_as_new_event_attributes")

    while True:
        event = await first_event(client, root, run_id, past)
        if not event.HasField("workflow_execution_continued_as_new_event_attributes"):
            return
        run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id


async def test_a_worker_killed_after_the_root_moved_mid_turn_loses_nothing(tmp_path: Path) -> None:
    """The turn's activity is retried on a new worker in a later root run than the one that
    started it: it polls from its own offset and is answered from the run's `base`, the
    deliveries before it in its log (flushed before the move), the rest from the run. The tree
    completes; every notice is in the root's log once; the root ran the cut-off turn and its
    continuation, nothing more (a wrong `taken` would wake another turn, past the script)."""
    from test_faults import dsh_worker

    script = tmp_path / "held.yaml"
    script.write_text(held_fan_out(KILL_FAN_OUT))
    plan = plan_flow(script)
    async with dev_server() as client:
        address = client.service_client.config.target_host
        queue = f"moved-kill-{uuid.uuid4().hex[:8]}"
        temporal = plan.config.temporal.model_copy(update={
            "task_queue": queue, "heartbeat_timeout_seconds": HEARTBEAT, "continue_as_new_after": LIMIT,
            "turn_workflows": "root"})
        testing = plan.config.testing.model_copy(update={"fence_timeout_seconds": BACKSTOP})
        config = plan.config.model_copy(update={"temporal": temporal, "testing": testing})
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        home = tmp_path / "home"
        request = RunRequest(home=home, config=config, transcript=plan.script, fences_allowed=True,
                             sinks=RunSinks(on_started=started.set_result))
        with dsh_worker(address, queue, tmp_path) as first:
            task = asyncio.create_task(run_tree_temporal(request, temporal, client=client))
            root = await asyncio.wait_for(started, BACKSTOP)
            first_run = (await client.get_workflow_handle(root).describe()).run_id
            assert first_run is not None
            await asyncio.wait_for(continued_as_new(client, root, first_run), BACKSTOP)  # moved mid-turn
            await asyncio.wait_for(took(client, root, first_run, 1 + KILL_FAN_OUT), BACKSTOP)  # the task, every notice
            os.killpg(first.pid, signal.SIGKILL)
            assert await asyncio.to_thread(first.wait) == -signal.SIGKILL
        assert not task.done()
        with dsh_worker(address, queue, tmp_path):
            result = await asyncio.wait_for(task, BACKSTOP)
        inputs = await runs_of(client, root)
    assert (result.stop_reason, result.output) == ("completed", "NOTED")
    assert [(v["code"], v["message"]) for v in result.violations] == [("FENCE_UNUSED", "fence 1 (hold on root) never engaged")]
    assert any((i.get("carried") or {}).get("turn") for i in inputs)
    # One turn workflow in all: its retry ran the continuation too; a retry that counted the
    # deliveries before `base` untaken left them "pending" in the run, which started turns for them.
    assert sum(i["turns"] for i in inputs) == 1, [(i.get("carried") or {}).get("turn") for i in inputs]
    # Each notice accepted once (a notice the cut-off step had taken is requeued by the log's
    # repair as the retry opens it: the same message, put back, not accepted again).
    events = SessionStore(home).read(root).events
    notices = [m["source"]["senderSessionId"] for e in events if e["type"] == "agent/inbox/spliced"
               and e["data"].get("outcome") != "requeued"
               for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]
    assert sorted(notices) == sorted(s["sessionId"] for s in result.subagents) and len(notices) == KILL_FAN_OUT
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1, 2]


async def test_a_turn_workflow_terminated_after_its_agent_moved_fails_the_turn(tmp_path: Path) -> None:
    """A root run that began mid-turn holds no handle on the turn's workflow: its outcome comes by
    signal, which a workflow terminated by hand never sends. The run watches it (`dsh.first_closed`,
    MOVED_TURN_PATCH) and hears the close as a failed turn: the root's run fails and the client
    says so, as when the turn's workflow is terminated before any move (its handle's failure).
    Before, the root's run waited for the signal for good: here, the backstop's timeout."""
    from temporalio.client import WorkflowFailureError

    from dsh.loader.engines.calls import chain

    script = tmp_path / "held.yaml"
    script.write_text(held_fan_out(SIZE))  # held until the test ends it: only a retried turn frees it
    plan = plan_flow(script)
    async with dev_server() as client:
        address = client.service_client.config.target_host
        queue = f"moved-end-{uuid.uuid4().hex[:8]}"
        temporal = plan.config.temporal.model_copy(update={
            "task_queue": queue, "continue_as_new_after": LIMIT, "turn_workflows": "root"})
        testing = plan.config.testing.model_copy(update={"fence_timeout_seconds": BACKSTOP})
        config = plan.config.model_copy(update={"temporal": temporal, "testing": testing})
        started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        request = RunRequest(home=tmp_path / "home", config=config, transcript=plan.script, fences_allowed=True,
                             sinks=RunSinks(on_started=started.set_result))
        from test_faults import dsh_worker

        with dsh_worker(address, queue, tmp_path):
            task = asyncio.create_task(run_tree_temporal(request, temporal, client=client))
            root = await asyncio.wait_for(started, BACKSTOP)
            first_run = (await client.get_workflow_handle(root).describe()).run_id
            assert first_run is not None
            await asyncio.wait_for(continued_as_new(client, root, first_run), BACKSTOP)  # moved mid-turn
            await asyncio.wait_for(took(client, root, first_run, 1 + SIZE), BACKSTOP)  # the task, every notice
            first = (await run_histories(client, root))[0]
            turn_id = next(e.start_child_workflow_execution_initiated_event_attributes.workflow_id for e in first.events
                           if e.HasField("start_child_workflow_execution_initiated_event_attributes"))
            await client.get_workflow_handle(turn_id).terminate("by hand")
            with pytest.raises(WorkflowFailureError) as failed:
                await asyncio.wait_for(task, BACKSTOP)
            current = (await client.get_workflow_handle(root).describe()).run_id
            await replays_and_kept(client, root, "moved-turn-terminated.json", run_id=current)
    assert current != first_run  # the run that failed began mid-turn
    assert "Child Workflow execution terminated" in chain(failed.value), chain(failed.value)
