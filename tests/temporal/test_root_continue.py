"""The root outlives one workflow run (loader/engines/README.md "Continue-as-new", "Not yet" item 3):
a server caps the updates of one workflow execution (`history.maxTotalUpdates`, 2,000 by default),
and every child-start batch, long-poll answer and (before) budget charge of the tree was an update
on the root, which never continued as new while a child was resident.

Here the server's cap is `UPDATE_CAP` and both engines run each transcript:
- a chain of children, each held until the root's turn before its notice ended, so the root takes
  one turn per notice with the later children resident: the tree needs more updates than one run
  may take, so the root continues as new (`temporal.continueAsNewUpdates`) with children resident,
  and each notice arrives once, in the local engine's order;
- one agent whose conversation makes more model requests than the cap: each request is a charge
  of the tree's budget, which is no longer an update, and the result's `budget` is the local one's;
- one root turn whose fan-out's notices, one long-poll answer each, would pass the cap: past
  `temporal.continueAsNewUpdates` the turn polls by query (`PollReply.spent`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporal_kit import dev_server, settlement_facts
from temporalio.client import Client
from test_tree_budget import both

from dsh.loader.session import SessionStore

pytestmark = pytest.mark.asyncio(loop_scope="module")

UPDATE_CAP = 40
CHAIN = 8  # children, each resident until the root's turn before its notice
STEPS = 45  # model requests of the one agent: more than UPDATE_CAP
BACKSTOP = 180.0  # a loud failure (past the cap the tree fails or waits forever), never an ordering


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def capped() -> AsyncIterator[Client]:
    async with dev_server("--dynamic-config-value", f"history.maxTotalUpdates={UPDATE_CAP}") as c:
        yield c


def chain(n: int) -> str:
    """Root turn 1 starts n children; child i is held until root turn i has ended, so its notice
    opens root turn i + 1 while children i + 1..n are resident."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in range(1, n + 1)]
    agents: dict[str, Any] = {
        "root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, *({"text": f"NOTED{i}"} for i in range(1, n + 1))]}}
    agents.update({f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]} for i in range(1, n + 1)})
    fences = [{"hold": {"agent": f"w{i}", "until": {"turnEnded": {"agent": "root", "turn": i}}}} for i in range(1, n + 1)]
    return json.dumps({"version": 1, "name": f"chain-{n}", "task": "Start a chain.", "fences": fences, "agents": agents})


def conversation(steps: int) -> str:
    replies: list[dict[str, Any]] = [{"toolCalls": [{"id": f"look{i}", "name": "list_agents", "arguments": {}}]}
                                     for i in range(1, steps)]
    return json.dumps({"version": 1, "name": f"conversation-{steps}", "task": "Look around a while.",
                       "agents": {"root": {"replies": [*replies, {"text": "LOOKED"}]}}})


async def runs_of(client: Client, workflow_id: str) -> list[dict[str, Any]]:
    """The input of every run of `workflow_id`, the first first (the continue-as-new chain), with
    the number of turns it started under `turns` (activities, or `dsh.turn_run` workflows) and the
    board long-polls it accepted under `board_polls`."""
    inputs: list[dict[str, Any]] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        turns = sum(e.activity_task_scheduled_event_attributes.activity_type.name == "dsh.turn"
                    for e in history.events if e.HasField("activity_task_scheduled_event_attributes"))
        turns += sum(e.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == "dsh.turn_run"
                     for e in history.events if e.HasField("start_child_workflow_execution_initiated_event_attributes"))
        polls = sum(e.workflow_execution_update_accepted_event_attributes.accepted_request.input.name == "fence_facts_after"
                    for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes"))
        inputs.insert(0, {**json.loads(started.input.payloads[0].data), "turns": turns, "board_polls": polls})
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return inputs


def turns_in_log(home: Path, session_id: str) -> int:
    return sum(e["type"] == "turn/start" for e in SessionStore(home).read(session_id).events)


def root_notices(home: Path, root_id: str) -> list[str]:
    """The sender of every settlement notice the root's log holds, in log order."""
    events = SessionStore(home).read(root_id).events
    return [m["source"]["senderSessionId"] for e in events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]


async def test_the_root_continues_as_new_with_children_resident_and_each_notice_arrives_once(
    capped: Client, tmp_path: Path
) -> None:
    script = chain(CHAIN)
    # Every 10 updates: each root run spans a turn or two, so some children's results reach the run
    # that started them as well as their signal.
    runs = await asyncio.wait_for(both(capped, tmp_path, script, {}, temporal={"continue_as_new_updates": 10}), BACKSTOP)
    (local, local_flow), (remote, remote_flow) = runs
    assert (remote.stop_reason, remote.output, remote.violations, remote.exit_code) == ("completed", f"NOTED{CHAIN}", [], 0)
    assert settlement_facts(remote_flow) == settlement_facts(local_flow)
    assert remote.budget == local.budget
    # Each child's notice once, in the children's order (child i settles before child i + 1 runs).
    order = {s["sessionId"]: s["label"] for s in remote.subagents}
    assert [order[s] for s in root_notices(tmp_path / "temporal", remote.root_session_id)] == [
        f"w{i}" for i in range(1, CHAIN + 1)]
    inputs = await runs_of(capped, remote.root_session_id)
    resident = [len((i.get("carried") or {}).get("resident") or []) for i in inputs[1:]]
    assert len(inputs) >= 3 and all(resident[:2]), resident  # ≥ 2 continue-as-news, children resident
    # Past `continueAsNewUpdates` a run refuses the board's long-polls (BOARD_SPENT) and the held
    # children read it by query, so the cap's rest stays for starts (without the refusal: 25-29).
    assert max(i["board_polls"] for i in inputs) <= 10, [i["board_polls"] for i in inputs]
    # A notice entered twice (its signal and the child's result) would wake the root for a turn
    # activity that finds it in the log already: one activity per turn in the log, no more.
    assert sum(i["turns"] for i in inputs) == turns_in_log(tmp_path / "temporal", remote.root_session_id) == CHAIN + 1


async def test_a_conversation_of_more_model_requests_than_the_update_cap_keeps_the_local_budget(
    capped: Client, tmp_path: Path
) -> None:
    runs = await asyncio.wait_for(both(capped, tmp_path, conversation(STEPS), {}), BACKSTOP)
    (local, local_flow), (remote, remote_flow) = runs
    assert (remote.stop_reason, remote.output, remote.violations, remote.exit_code) == ("completed", "LOOKED", [], 0)
    assert settlement_facts(remote_flow) == settlement_facts(local_flow)
    assert remote.budget == local.budget and local.budget["requests"] == STEPS


def fan_out(n: int) -> str:
    """One root turn that starts n children and waits in its second step for all n notices
    (benchmarks/fanout.py's): they are steered into that step, whose reply opens a third."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in range(1, n + 1)]
    agents: dict[str, Any] = {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "ALL_RECEIVED"}]}}
    agents.update({f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]} for i in range(1, n + 1)})
    fences = [{"hold": {"agent": "root", "turn": 1, "step": 2,
                        "until": {"inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": n}}}}]
    return json.dumps({"version": 1, "name": f"fan-out-{n}", "task": "Fan out.", "fences": fences, "agents": agents})


FAN_OUT = 90  # children of one root turn: polled by update alone, their notices reach UPDATE_CAP (60 do not)


async def test_one_turn_whose_polls_would_pass_the_update_cap_polls_by_query_and_loses_nothing(
    capped: Client, tmp_path: Path
) -> None:
    """A turn cannot continue as new, and each notice steered into it was one answer of its
    long-poll update: past the run's cap the server refused the polls (so the held step never saw
    its notices, FENCE_TIMEOUT) and the later child starts (children never run, REPLAY_UNCONSUMED).
    Once the run has taken `temporal.continueAsNewUpdates` updates, the turn polls by query."""
    runs = await asyncio.wait_for(both(capped, tmp_path, fan_out(FAN_OUT), {}, temporal={"continue_as_new_updates": 10}),
                                  BACKSTOP)
    (local, local_flow), (remote, remote_flow) = runs
    assert (remote.stop_reason, remote.output, remote.violations) == ("completed", "ALL_RECEIVED", [])
    local_facts, remote_facts = settlement_facts(local_flow), settlement_facts(remote_flow)
    assert remote_facts["turn_ends"] == local_facts["turn_ends"] and remote_facts["result"] == local_facts["result"]
    # Every notice once, all in the held step (their order is the settlement race on either engine).
    notices = root_notices(tmp_path / "temporal", remote.root_session_id)
    assert sorted(notices) == sorted(s["sessionId"] for s in remote.subagents) and len(notices) == FAN_OUT
    history = await capped.get_workflow_handle(remote.root_session_id).fetch_history()
    accepted = [e for e in history.events if e.HasField("workflow_execution_update_accepted_event_attributes")]
    assert len(accepted) < UPDATE_CAP  # the polls past continueAsNewUpdates were queries (by update alone: 40)
