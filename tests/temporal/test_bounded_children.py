"""An agent's children list stays bounded by what is resident (issue 12 item 2, "large payloads
stay under the 2 MB limit"; loader/engines/README.md "Large payloads"). A run hands the run it
continues as only its resident children's refs, and a turn only the resident ones: before, both
carried every child the residency ever started (~200 bytes each, the limit at ~8,000–10,000). What
the list served still works: `{{child:...}}` binds from the agent's own log, and `subagent.list`
asks every run of the parent's workflow for the children it started. With workers without a
home, a settled child's claim (`Carried.homeless`) is not carried either: a cold resume learns it
from its resume check.

The tree, every agent continuing as new after each turn with work ahead: the root starts a (held
until the root's first turn ended, so its notice wakes the second); the second turn starts b (held
likewise); b's notice wakes the third, which messages a, settled and started two runs earlier,
through `{{child:start-a}}` (a cold resume); a's second notice wakes the last turn.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporal_kit import backstopped, client, run_histories, run_temporal, settlement_facts  # noqa: F401  (client: the module's dev-server fixture)
from test_homes import queues_of, run_ids
from temporalio.client import Client

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.control import user_call
from dsh.loader.engines.wire import agent_workflow_id
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0

SCRIPT = {
    "version": 1, "name": "bounded-children", "task": "Start a, then b, then message a again.",
    "fences": [
        {"hold": {"agent": "a", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}},
        {"hold": {"agent": "b", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 2}}}},
        {"hold": {"agent": "a", "turn": 2, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 3}}}},
    ],
    "agents": {
        "root": {"replies": [
            {"toolCalls": [{"id": "start-a", "name": "subagent", "arguments": {"label": "a", "prompt": "Reply A."}}]},
            {"text": "STARTED_A"},
            {"toolCalls": [{"id": "start-b", "name": "subagent", "arguments": {"label": "b", "prompt": "Reply B."}}]},
            {"text": "STARTED_B"},
            {"toolCalls": [{"id": "again", "name": "send_message",
                            "arguments": {"agent_id": "{{child:start-a}}", "message": "Reply A again."}}]},
            {"text": "SENT"},
            {"text": "DONE"},
        ]},
        "a": {"spawnedBy": "start-a", "replies": [{"text": "A"}, {"text": "A_AGAIN"}]},
        "b": {"spawnedBy": "start-b", "replies": [{"text": "B"}]},
    },
}


def plan(tmp_path: Path, spec: dict[str, Any], **temporal: Any) -> FlowPlan:
    """`spec` as a flow plan, its `temporal.*` keys updated by `temporal`."""
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    base = plan_flow(str(path))
    config = base.config.model_copy(update={"temporal": base.config.temporal.model_copy(update=temporal)})
    return FlowPlan(script=base.script, config=backstopped(config))


async def test_a_run_carries_only_its_resident_children_and_every_child_is_still_bound_and_listed(
    client: Client, tmp_path: Path
) -> None:
    flow_plan = plan(tmp_path, SCRIPT, continue_as_new_after=1)
    local = await arun_flow(flow_plan, home=tmp_path / "local")
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=flow_plan.config, transcript=flow_plan.script, fences_allowed=True)
    async with make_worker(client, queue):
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                        BACKSTOP)
        root = result.root_session_id
        # Asked while a worker runs: a closed run answers its `children` query by replaying.
        listed = await user_call(client, root, "subagent.list", {"parentSessionId": root})
        runs = await run_histories(client, root)
        [a] = [s["sessionId"] for s in result.subagents if s["label"] == "a"]
        epochs = await run_ids(client, root, agent_workflow_id(root, a))
        creates = [[kind for kind, _ in await queues_of(client, agent_workflow_id(root, a), run_id)].count(
            "dsh.create_session") for run_id in epochs]
    # `{{child:start-a}}` bound in a run that never started a (nor carried it), and the flow is the
    # local engine's.
    assert (result.output, result.violations) == ("DONE", [])
    flow = Flow(normalize(project(home, root, result, result.violations, flow_plan.script.spec.name)))
    assert settlement_facts(flow) == settlement_facts(local)
    # Each run after the first was handed the refs of exactly its resident children.
    carried = [json.loads(run.events[0].workflow_execution_started_event_attributes.input.payloads[0].data)["carried"]
               for run in runs[1:]]
    assert len(carried) >= 3  # after turns 1, 2 and 3 (children resident after each)
    for each in carried:
        assert [c["child_id"] for c in each["children"]] == each["resident"]
        # Workers without a home: a settled child's claim is not carried either (below, learnt again).
        assert set(each["homeless"]) <= set(each["resident"])
    labels = {c["child_id"]: c["descriptor"]["label"] for each in carried for c in each["children"]}
    # The run after the root's second turn: a had settled (its notice woke that turn), so only b
    # could be carried; before, a went on in every run's input.
    assert [labels[c] for c in carried[1]["resident"]] in (["b"], [])
    # a's second epoch, resumed by a run that carried nothing of it, was told its log is claimed
    # (the resume check found it): its create activity ran once, in the first epoch.
    assert creates == [1, 0]
    # `subagent.list` lists both, in the order they started, from the runs that started them.
    assert [(e["label"], e["status"], e["depth"]) for e in listed["entries"]] == [("a", "ready", 1), ("b", "ready", 1)]


EARLIER_EPOCH = {
    "version": 1, "name": "earlier-epoch-child", "task": "Start mid, then message it again.",
    "fences": [
        {"hold": {"agent": "mid", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}},
        {"hold": {"agent": "leaf", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "mid", "turn": 1}}}},
        {"hold": {"agent": "mid", "turn": 3, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 2}}}},
        {"hold": {"agent": "leaf", "turn": 2, "step": 1, "until": {"turnEnded": {"agent": "mid", "turn": 3}}}},
    ],
    "agents": {
        "root": {"replies": [
            {"toolCalls": [{"id": "m", "name": "subagent", "arguments": {"label": "mid", "prompt": "Start leaf."}}]},
            {"text": "R_STARTED"},
            {"toolCalls": [{"id": "again", "name": "send_message",
                            "arguments": {"agent_id": "{{child:m}}", "message": "Message leaf."}}]},
            {"text": "R_SENT"},
            {"text": "DONE"},
        ]},
        "mid": {"spawnedBy": "m", "replies": [
            {"toolCalls": [{"id": "l", "name": "subagent", "arguments": {"label": "leaf", "prompt": "Reply."}}]},
            {"text": "M1"},
            {"text": "M2"},
            {"toolCalls": [{"id": "more", "name": "send_message", "arguments": {"agent_id": "{{child:l}}", "message": "More."}}]},
            {"text": "M3"},
            {"text": "M4"},
        ]},
        "leaf": {"spawnedBy": "l", "replies": [{"text": "L1"}, {"text": "L2"}]},
    },
}


async def test_a_child_binds_in_its_second_epoch_a_child_it_spawned_in_its_first(client: Client, tmp_path: Path) -> None:
    """mid's second epoch is a new workflow run that never started leaf: `{{child:l}}` binds from
    mid's log, and the flow is the local engine's. Before, only the children the current run started
    were bound, and the send failed unresolved."""
    flow_plan = plan(tmp_path, EARLIER_EPOCH)
    local = await arun_flow(flow_plan, home=tmp_path / "local")
    run = await asyncio.wait_for(run_temporal(client, flow_plan, tmp_path / "temporal"), BACKSTOP)
    assert (run.result.output, run.result.violations) == ("DONE", [])
    flow = run.flow
    facts = settlement_facts(flow)
    assert facts == settlement_facts(local)
    assert flow == local
    # mid settled twice (one notice per epoch), leaf twice into mid.
    assert sorted((n["from"], n["to"]) for n in facts["notices"]) == [("S2", "S1"), ("S2", "S1"), ("S3", "S2"), ("S3", "S2")]
