"""An agent's run starts no child past `temporal.maxRunningChildren` running at once
(loader/engines/README.md "Scale", "Not yet" item 3).

A Temporal server refuses a start command once a workflow run holds
`limit.numPendingChildExecutions.error` children (2,000 by default) that have not closed, and it
refuses it again at every retry of the workflow task: the run, and the tree, stalled for good (seen
before this limit: four children under a limit of 2 gave no result within 40 s). The server here
allows `SERVER_LIMIT`, and the runs set `temporal.maxRunningChildren` to the same; the root's turn
runs in a workflow of its own, which holds one of those (`RUNNING` agent children run):
- a turn's `subagent` past the limit is refused with RUNNING_LIMIT before anything is charged or
  written (`RunningRoom`, asking the workflow how many run), and the tree goes on;
- the workflow's own check, the last word (a parallel cold resume from elsewhere): a start past
  the limit is answered refused with no command sent.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from temporal_kit import backstopped, chain_run_ids, dev_server, replays_and_kept, run_histories
from temporalio.client import Client
from temporalio.service import RPCError

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines import worker
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.wire import StartChild, TurnInput, TurnResult
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow
from dsh.loader.texts import render

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER_LIMIT = 2
# The root's turn runs in a workflow of its own (`temporal.turnWorkflows: root`), itself one of the
# root run's pending children: one agent child runs, the limit less that one.
RUNNING = SERVER_LIMIT - 1
BACKSTOP = 120.0  # a loud failure (past the server's limit the tree stalls for good), never an ordering


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def limited() -> AsyncIterator[Client]:
    async with dev_server("--dynamic-config-value", f"limit.numPendingChildExecutions.error={SERVER_LIMIT}") as c:
        yield c


def transcript(tmp_path: Path, spawns: int) -> Path:
    """The root starts `spawns` children in one step; w1 is held until the root's second step, so
    it runs while the others are asked for. Only w1 is scripted: the rest are refused. The root's
    second step is held until w1's first: the root's turn, and so its turn workflow (one of the
    run's pending children), is still running while w1's turn is about to run (the test's gate);
    without it the turn could end first and free the slot the workflow's check counts."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in range(1, spawns + 1)]
    path = tmp_path / "limited.json"
    path.write_text(json.dumps({
        "version": 1, "name": "running-limit", "task": "Start workers.",
        "fences": [{"hold": {"agent": "w1", "turn": 1, "step": 1,
                             "until": {"stepReached": {"agent": "root", "turn": 1, "step": 2}}}},
                   {"hold": {"agent": "root", "turn": 1, "step": 2,
                             "until": {"stepReached": {"agent": "w1", "turn": 1, "step": 1}}}}],
        "agents": {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "DONE"}]},
                   "w1": {"spawnedBy": "c1", "replies": [{"text": "W1_DONE"}]}}}))
    return path


async def run(client: Client, script: Path, home: Path) -> RunResult:
    plan = plan_flow(script)
    config: Config = plan.config.model_copy(update={
        "temporal": plan.config.temporal.model_copy(update={"max_running_children": SERVER_LIMIT,
                                                            "turn_workflows": "root"})})
    queue = f"dsh-limit-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(config), transcript=plan.script, fences_allowed=True)
    async with worker.make_worker(client, queue):
        return await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                      BACKSTOP)


def tool_errors(home: Path, session_id: str) -> list[dict[str, Any]]:
    return [e["data"]["error"] for e in SessionStore(home).read(session_id).events
            if e["type"] == "tool/result" and "error" in e["data"]]


async def ask_one_more(client: Client, root_id: str) -> dict[str, Any]:
    """Ask the root's run itself to start one more child, as a parallel cold resume from elsewhere
    would: how many it said ran before and after, the ids it refused, and the one asked for."""
    handle = client.get_workflow_handle(root_id)
    running = await handle.query("running_children", result_type=int)
    extra = StartChild(child_id=f"session-{uuid.uuid4()}", descriptor={"mode": "continuable"},
                       prompt={"role": "user", "content": "x", "id": "m-extra"}, depth=1)
    refused = await asyncio.wait_for(handle.execute_update("start_children", [extra], result_type=list), BACKSTOP)
    return {"running": running, "refused": refused, "extra": extra.child_id,
            "running_after": await handle.query("running_children", result_type=int)}


async def test_a_subagent_past_the_running_limit_is_refused_before_it_is_charged_or_written(
    limited: Client, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    result = await run(limited, transcript(tmp_path, spawns=3), home)
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    refusal = {"code": "RUNNING_LIMIT", "message": render("T-ENGINE-RUNNING-LIMIT", limit=RUNNING)}
    assert tool_errors(home, result.root_session_id) == [refusal, refusal]  # c2 and c3
    # Nothing written for the refused ones: the root and w1 only, and w1's notice reached the root.
    [child] = [s["sessionId"] for s in result.subagents]
    assert sorted(p.parent.name for p in (home / "sessions").glob("*/session.jsonl")) == sorted(
        [result.root_session_id, child])
    assert result.budget is not None and result.budget["children"] == 1  # nor charged
    notices = [m["source"]["senderSessionId"] for e in SessionStore(home).read(result.root_session_id).events
               if e["type"] == "agent/inbox/spliced" for m in e["data"].get("inserted") or []
               if m["source"]["kind"] == "subagent-settled"]
    assert notices == [child]


async def test_the_workflow_refuses_a_start_past_the_running_limit_with_no_command_sent(
    limited: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While w1's turn is held (so w1's run cannot close), the test itself asks the root's run to
    start one more child, as a parallel cold resume from elsewhere would: it is answered refused.
    Without the workflow's check the start command goes out, the server refuses it at every retry
    of the root's workflow task, and this update never returns."""
    home = tmp_path / "home"
    answers: dict[str, Any] = {}
    real = worker.run_turn

    async def gated(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        if spec.agent.parent_id is not None:  # w1's turn, before it runs: w1 is running
            answers.update(await ask_one_more(limited, spec.agent.run.root_id))
        return await real(spec, *args, **kwargs)

    monkeypatch.setattr(worker, "run_turn", gated)
    result = await run(limited, transcript(tmp_path, spawns=1), home)
    assert answers["running"] == RUNNING == 1  # w1, started and not closed (and the root's turn workflow)
    assert answers["refused"] == [answers["extra"]]
    assert answers["running_after"] == 1
    # No run of the refused child was ever started, and the tree finished as scripted.
    with pytest.raises(RPCError):
        await limited.get_workflow_handle(f"{result.root_session_id}/{answers['extra']}").describe()
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert len(result.subagents) == 1  # w1 alone
    # The root's run, its refusal (the patch marker) included, replays and is kept for the Replayer.
    await replays_and_kept(limited, result.root_session_id, "running-limit.0.json")


def carried_transcript(tmp_path: Path) -> Path:
    """The root starts w1 and continues as new after each turn (`continueAsNewAfter: 1`); w1's
    report wakes the root's second turn, in a later run that holds no handle to w1, which asks for
    w2; w1 finishes only once that turn ended."""
    path = tmp_path / "carried.json"
    path.write_text(json.dumps({
        "version": 1, "name": "running-limit-carried", "task": "Start workers.",
        "fences": [{"hold": {"agent": "w1", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}},
                   {"hold": {"agent": "w1", "turn": 1, "step": 2, "until": {"turnEnded": {"agent": "root", "turn": 2}}}}],
        "agents": {
            "root": {"replies": [
                {"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "w1", "prompt": "Report, then finish."}}]},
                {"text": "STARTED"},
                {"toolCalls": [{"id": "c2", "name": "subagent", "arguments": {"label": "w2", "prompt": "Reply."}}]},
                {"text": "ASKED"},
                {"text": "DONE"}]},
            "w1": {"spawnedBy": "c1", "replies": [
                {"toolCalls": [{"id": "r1", "name": "report", "arguments": {"output": "HALF"}}]},
                {"text": "W1_DONE"}]}}}))
    return path


async def test_a_child_an_earlier_run_started_counts_against_the_running_limit(
    limited: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's pending-children limit is per run: a run continued as new holds none of the
    children its earlier runs started, so it could start the limit again, and carry a ref of
    each (RESIDENT_LIMIT_PATCH). w1, resident and running, started by the root's first run,
    counts in the second: the turn's `subagent` for w2 is refused, and so is a start asked of the
    workflow itself (as a parallel cold resume would) before that turn runs."""
    home = tmp_path / "home"
    answers: dict[str, Any] = {}
    real = worker.run_turn

    async def gated(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        if spec.agent.parent_id is None and spec.running and not answers:  # the root's turn with w1 carried
            answers.update(await ask_one_more(limited, spec.agent.run.root_id))
        return await real(spec, *args, **kwargs)

    monkeypatch.setattr(worker, "run_turn", gated)
    plan = plan_flow(carried_transcript(tmp_path))
    config: Config = plan.config.model_copy(update={"temporal": plan.config.temporal.model_copy(update={
        "max_running_children": SERVER_LIMIT, "turn_workflows": "root", "continue_as_new_after": 1})})
    queue = f"dsh-limit-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(config), transcript=plan.script, fences_allowed=True)
    async with worker.make_worker(limited, queue):
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=limited),
                                        BACKSTOP)
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    assert answers["running"] == 1 and answers["refused"] == [answers["extra"]]
    refusal = {"code": "RUNNING_LIMIT", "message": render("T-ENGINE-RUNNING-LIMIT", limit=RUNNING)}
    assert tool_errors(home, result.root_session_id) == [refusal]  # c2
    assert [s["label"] for s in result.subagents] == ["w1"]
    # The run that refused (its patch marker) replays and is kept for the Replayer.
    root = result.root_session_id
    runs = await run_histories(limited, root)
    ids = await chain_run_ids(limited, root, runs)
    [k] = [k for k, r in enumerate(runs) if "resident-children-limited" in str(r.events)]
    await replays_and_kept(limited, root, "running-limit-carried.1.json", run_id=ids[k])
