"""Homes, over a parent's continue-as-new: what a run carries of its children's homes is bounded by
its resident children (loader/engines/README.md "Large payloads"), and a settled child is still
found and resumed where its log is.

root -> mid -> par -> leaf, and mid -> keeper. Every log is on home a but leaf's, on b, a home
only par's first epoch heard of (mid never does; it learns it from par's result). par settles its
first epoch; mid, with keeper still resident, continues as new: its new run carries keeper's home
and not par's, and what par's last run knew goes into `heard_any`. Only then is keeper let go (a
fact the test publishes), its notice wakes mid, which resumes par (found by its resume checks, a
home at a time), and par's second epoch, told the homes in `heard_any`, resumes leaf on b.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from killable_worker import KillableWorker
from temporal_kit import chain_run_ids, client, replays_and_kept, run_histories, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_homes import BACKSTOP, run_ids, run_tree_temporal, sessions_in
from test_homes_gaps import epochs_in, homes_ab, own_client, placed_on_b, request_for

from dsh.loader.engines import worker as worker_module
from dsh.loader.engines.wire import agent_workflow_id
from dsh.loader.engines.worker import make_worker
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

KEPT = {
    "name": "homes-carried",
    "fences": [
        {"hold": {"agent": "leaf", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "par", "turn": 1}}}},
        {"hold": {"agent": "par", "turn": 2, "step": 1, "until": {"turnEnded": {"agent": "mid", "turn": 1}}}},
        # Published by the test once mid's run has continued as new past par's notice.
        {"hold": {"agent": "keeper", "turn": 1, "step": 1, "until": {"hangReached": {"agent": "root"}}}},
        {"hold": {"agent": "leaf", "turn": 2, "step": 1, "until": {"turnEnded": {"agent": "par", "turn": 3}}}},
        {"hold": {"agent": "par", "turn": 3, "step": 1, "until": {"turnEnded": {"agent": "mid", "turn": 3}}}},
    ],
    "agents": {
        "root": {"replies": [{"toolCalls": [{"id": "m", "name": "subagent", "arguments": {"label": "mid", "prompt": "Go."}}]},
                             {"text": "STARTED"}, {"text": "DONE"}]},
        "mid": {"spawnedBy": "m", "replies": [
            {"toolCalls": [{"id": "p", "name": "subagent", "arguments": {"label": "par", "prompt": "Go par."}},
                           {"id": "k", "name": "subagent", "arguments": {"label": "keeper", "prompt": "Wait."}}]},
            {"text": "M1"},
            {"text": "M2"},
            {"toolCalls": [{"id": "again", "name": "send_message", "arguments": {"agent_id": "{{child:p}}", "message": "Again."}}]},
            {"text": "M3"},
            {"text": "M4"}]},
        "par": {"spawnedBy": "p", "replies": [
            {"toolCalls": [{"id": "l", "name": "subagent", "arguments": {"label": "leaf", "prompt": "Go leaf."}}]},
            {"text": "P1"}, {"text": "P2"},
            {"toolCalls": [{"id": "more", "name": "send_message", "arguments": {"agent_id": "{{child:l}}", "message": "More."}}]},
            {"text": "P3"}, {"text": "P4"}]},
        "leaf": {"spawnedBy": "l", "replies": [{"text": "L1"}, {"text": "L2"}]},
        "keeper": {"spawnedBy": "k", "replies": [{"text": "K1"}]},
    },
}


def carried_of(history: Any) -> dict[str, Any]:
    started = history.events[0].workflow_execution_started_event_attributes
    return json.loads(started.input.payloads[0].data).get("carried") or {}


async def heard_carried(client: Client, workflow_id: str, queue: str) -> None:
    """mid's latest run was handed `queue` in `heard_any` (par settled before it continued as new):
    a state of the server's, read until it holds."""
    while True:
        history = await client.get_workflow_handle(workflow_id).fetch_history()
        if queue in carried_of(history).get("heard_any", []):
            return
        await asyncio.sleep(0.1)  # polling a server state, not an ordering


async def test_a_settled_childs_home_is_not_carried_and_its_next_epoch_still_finds_its_own_child(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, queue, on_a, on_b = homes_ab(tmp_path)
    ids: dict[str, str] = {}
    mid_known = asyncio.Event()
    monkeypatch.setattr(worker_module, "Worker", KillableWorker)
    placed_on_b(monkeypatch, on_a, on_b, ids, {"m": mid_known})
    base = plan_flow(write_transcript(tmp_path, KEPT))
    temporal = base.config.temporal.model_copy(update={"continue_as_new_after": 1})
    plan = type(base)(script=base.script, config=base.config.model_copy(update={"temporal": temporal}))
    records: list[dict[str, Any]] = []
    async with make_worker(await own_client(client), queue, home=a), make_worker(await own_client(client), queue, home=b):
        task = asyncio.ensure_future(run_tree_temporal(request_for(plan, tmp_path / "client", records), queue, client))
        await asyncio.wait_for(mid_known.wait(), BACKSTOP)
        root = ids["None"]
        mid = agent_workflow_id(root, ids["m"])
        await asyncio.wait_for(heard_carried(client, mid, on_b), BACKSTOP)
        await client.get_workflow_handle(root).signal(AgentWorkflow.fence_facts, [["hangReached", "root"]])
        result = await asyncio.wait_for(task, BACKSTOP)
        mid_runs = await run_histories(client, mid)
        par = agent_workflow_id(root, ids["p"])
        par_epochs = await run_ids(client, mid, par)
        second = await client.get_workflow_handle(par, run_id=par_epochs[-1]).fetch_history()
        # mid's run that started par's second epoch (told `heard_any`) replays, and is kept.
        [k] = [k for k, h in enumerate(mid_runs) if any(
            e.child_workflow_execution_started_event_attributes.workflow_execution.run_id == par_epochs[-1]
            for e in h.events if e.HasField("child_workflow_execution_started_event_attributes"))]
        run_id = (await chain_run_ids(client, mid, mid_runs))[k]
        await replays_and_kept(client, mid, "homes-carried.mid.json", run_id=run_id)
    assert (result.output, result.violations) == ("DONE", [])
    assert sessions_in(b) == {ids["l"]}
    assert epochs_in(a, ids["p"]) == [1, 2] and epochs_in(b, ids["l"]) == [1, 2]  # leaf resumed on b
    # par's second epoch was told b, from `heard_any`: mid's own runs never knew it.
    started = second.events[0].workflow_execution_started_event_attributes
    assert on_b in json.loads(started.input.payloads[0].data)["known_homes"]
    # Every run of mid carried the homes of its resident children only, and the run that resumed
    # par carried par's neither there nor in `heard_homes`.
    carried = [carried_of(h) for h in mid_runs[1:]]
    for each in carried:
        assert set(each["homes"]) <= set(each["resident"]) and set(each["heard_homes"]) <= set(each["resident"])
    assert any(on_b in each.get("heard_any", []) and ids["p"] not in each["homes"] for each in carried)
