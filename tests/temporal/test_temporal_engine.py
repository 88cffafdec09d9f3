"""The Temporal engine against the local one (issue 12 item 4): one test per shipped transcript runs
it on both engines, keylessly, and compares the settlement facts (each agent's turn ends and stop
reasons, which notices and reports reach which parent with their texts, the final output) — and,
since the replay is deterministic on both, the whole normalized flow.

One dev server serves the module (its start is most of a test's cost); each test has its own task
queue, worker and homes.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporal_kit import backstopped, both_engines, client, comparable, records_of, run_temporal, settlement_facts, turn_started  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from test_temporal_control import root_turn_completed

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.wire import ChildState
from dsh.loader.engines.worker import make_worker
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.hang_note import HANG_REACHED_EVENT
from dsh.loader.headless import RunRequest, RunSinks
from dsh.loader.session import SessionStore
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow
from dsh.loader.transcripts import load_transcript

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "transcripts").glob("*.yaml"))
# A demo for `dsh interrupt` by hand: it parks until someone interrupts it, on either engine.
MANUAL = {"interrupt-demo"}


def cases() -> list[str]:
    return [name for name in SHIPPED if name not in MANUAL]  # every shipped transcript runs on Temporal


@pytest.mark.asyncio(loop_scope="module")
async def test_the_catalogue_is_covered() -> None:
    assert MANUAL <= set(SHIPPED)
    assert load_transcript("interrupt-demo").spec.fences == []  # MANUAL: nothing orders it but a user


@pytest.mark.parametrize("name", cases())
async def test_a_shipped_transcript_gives_the_same_settlement_facts_on_both_engines(
    client: Client, name: str, tmp_path: Path
) -> None:
    local, temporal = await both_engines(client, name, tmp_path)
    assert temporal.result.violations == []
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    assert temporal.flow == local
    assert temporal.result.exit_code == 0


async def test_background_settlement_notice_reaches_the_root_once_and_is_steered_into_its_turn(
    client: Client, tmp_path: Path
) -> None:
    local, temporal = await both_engines(client, "background-settlement", tmp_path)
    facts = settlement_facts(temporal.flow)
    [notice] = facts["notices"]
    assert notice == {"kind": "subagent-settled", "from": "S2", "to": "S1", "stopReason": "completed"}
    assert facts["turn_ends"] == {"0": [{"kind": "completed"}], "0.1": [{"kind": "completed"}]}
    assert temporal.result.output == "PARENT_RECEIVED_CHILD_RESULT"


COLD_RESUME = """\
version: 1
name: cold-resume
description: The root messages its child after the child settled, twice; each epoch owes one notice.
task: Start a child, and message it again after each notice.
agents:
  root:
    replies:
      - toolCalls:
          - {id: start-child, name: subagent, arguments: {label: helper, prompt: Reply with ONE.}}
      - text: STARTED
      - toolCalls:
          - {id: again, name: send_message, arguments: {agent_id: "{{child:start-child}}", message: Reply with TWO.}}
      - text: SENT_TWO
      - toolCalls:
          - {id: third, name: send_message, arguments: {agent_id: "{{child:start-child}}", message: Reply with THREE.}}
      - text: SENT_THREE
      - text: DONE
  helper:
    spawnedBy: start-child
    replies:
      - text: ONE
      - text: TWO
      - text: THREE
"""


async def test_a_message_to_a_settled_child_cold_resumes_it_under_the_same_workflow_id_with_the_next_epoch(
    client: Client, tmp_path: Path
) -> None:
    script = tmp_path / "cold-resume.yaml"
    script.write_text(COLD_RESUME)
    local, temporal = await both_engines(client, str(script), tmp_path)
    assert temporal.result.violations == []
    facts = settlement_facts(temporal.flow)
    assert facts == settlement_facts(local)
    assert temporal.flow == local
    assert [n["stopReason"] for n in facts["notices"]] == ["completed"] * 3  # one notice per epoch
    [child] = [p.parent.name for p in (tmp_path / "temporal" / "sessions").glob("*/session.jsonl")
               if p.parent.name != temporal.result.root_session_id]
    events = SessionStore(tmp_path / "temporal").read(child).events
    assert [e["data"]["epoch"] for e in events if e["type"] == "subagent/epoch"] == [1, 2, 3]
    # Epoch 3 is the latest run under the one id `<root>/<child>` (the reuse policy allowed it).
    history = await client.get_workflow_handle(f"{temporal.result.root_session_id}/{child}").fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert json.loads(started.input.payloads[0].data)["epoch"] == 3


async def test_a_child_continued_as_new_between_turns_still_settles_once_with_the_right_notice(
    client: Client, tmp_path: Path
) -> None:
    """interrupt-parked-resume with `temporal.continueAsNewAfter: 1`: the worker's residency spans
    two runs (parked after its first turn, it continues as new with its queue's state), and the
    tree gives the local engine's flow: one notice, after B, C and D."""
    plan = continued_as_new(plan_flow("interrupt-parked-resume"))
    local = await arun_flow(plan, home=tmp_path / "local")
    temporal = await run_temporal(client, plan, tmp_path / "temporal")
    assert temporal.result.violations == []
    facts = settlement_facts(temporal.flow)
    assert facts == settlement_facts(local)
    assert temporal.flow == local
    [notice] = facts["notices"]
    assert (notice["from"], notice["stopReason"]) == ("S2", "completed")
    root = temporal.result.root_session_id
    [worker] = [p.parent.name for p in (tmp_path / "temporal" / "sessions").glob("*/session.jsonl") if p.parent.name != root]
    history = await client.get_workflow_handle(f"{root}/{worker}").fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.continued_execution_run_id  # the latest run continued an earlier one
    given = json.loads(started.input.payloads[0].data)
    carried = given["carried"]
    assert carried["runs"] == 2 and len(carried["parked"]) == 2  # B and C, kept parked across the runs
    # The root's follow-ups the first run received: B and C, and D too when D reached that run
    # before its continue-as-new closed it (the server refuses the closing task for a signal that
    # came meanwhile, and the run takes it first: D is then carried pending). Either order is the
    # histories'; what is guaranteed is that the count covers exactly the follow-ups handed over
    # (its stall reports count on from there), and D reaches the second run once either way.
    pending = [d["message"]["content"][0]["text"] for d in given["deliveries"] if d["send"] == "followup"]
    assert pending in ([], ["D"]), given["deliveries"]
    assert carried["seen"] == 2 + len(pending)


def continued_as_new(plan: FlowPlan) -> FlowPlan:
    """`plan` with `temporal.continueAsNewAfter: 1`: a child continues as new after each turn."""
    temporal_config = plan.config.temporal.model_copy(update={"continue_as_new_after": 1})
    return FlowPlan(script=plan.script, config=plan.config.model_copy(update={"temporal": temporal_config}))


def gated_worker(tmp_path: Path) -> Path:
    """interrupt-parked-resume with the worker's second turn held until a fact only the test
    publishes (`hangReached root`: the root never hangs), instead of the root's first turn end."""
    spec = yaml.safe_load(load_transcript("interrupt-parked-resume").path.read_text())
    spec["fences"][2]["hold"]["until"] = {"hangReached": {"agent": "root"}}
    path = tmp_path / "interrupt-parked-resume.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


async def turns_scheduled(client: Client, workflow_id: str, count: int) -> None:
    """`count` turn activities scheduled over the runs of `workflow_id` (its histories, long-polled
    run by run along the continue-as-new chain)."""
    latest = await client.get_workflow_handle(workflow_id).fetch_history()
    seen, run_id = 0, latest.events[0].workflow_execution_started_event_attributes.first_execution_run_id
    while True:
        async for event in client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history_events(
                wait_new_event=True):
            seen += turn_started(event)
            if seen >= count:
                return
            if event.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = event.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
                break


async def test_a_stall_report_decided_before_the_parents_latest_followup_does_not_release_the_tree(
    client: Client, tmp_path: Path
) -> None:
    """Issue 12's flake: the worker, continued as new before D reached it, told the root "stalled"
    (B and C parked) while D was on its way; that report reached the root after D had, and the
    root, its turn over, released the tree: the notice entered as an inject and the root's last
    reply and the worker's turns stayed unconsumed (REPLAY_UNCONSUMED on both). The window is
    driven here: the worker is held in its turn for D (all its own reports are in the root's
    history by then) and the test signals the root that stale report; only then is the worker let
    go. The root drops it (2 follow-ups seen < 3 sent) and the tree gives the local flow."""
    local = await arun_flow(continued_as_new(plan_flow("interrupt-parked-resume")), home=tmp_path / "local")
    plan = continued_as_new(plan_flow(gated_worker(tmp_path)))
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True,
                         sinks=RunSinks(on_started=started.set_result))
    async with make_worker(client, queue):
        run = asyncio.create_task(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client))
        root = await asyncio.wait_for(started, 60)
        await asyncio.wait_for(root_turn_completed(client, root), 60)  # B, C, the interrupt and D sent
        [worker] = [p.parent.name for p in (home / "sessions").glob("*/session.jsonl") if p.parent.name != root]
        # The worker's turn for B, C, D is scheduled: D reached it, and every report it made
        # before is in the root's history (a report is signalled before the turn is scheduled).
        await asyncio.wait_for(turns_scheduled(client, f"{root}/{worker}", 2), 60)
        handle = client.get_workflow_handle(root)
        stale = ChildState(child_id=worker, stalled=True, parked=[worker], seen=2)  # decided before D
        await handle.signal(AgentWorkflow.child_state, stale)
        await handle.signal(AgentWorkflow.fence_facts, [["hangReached", "root"]])
        result = await asyncio.wait_for(run, 60)
    assert (result.violations, result.released, result.output) == ([], [], "CHILD_RESUMED_OK")
    flow = Flow(normalize(project(home, root, result, result.violations, plan.script.spec.name)))
    assert settlement_facts(flow) == settlement_facts(local)
    assert flow == local


LIST_AGENTS = """\
version: 1
name: list-agents
description: The root lists its child while it runs (held by a fence) and after it settled.
task: Start a child and list it.
fences:
  - hold: {agent: alpha, turn: 1, step: 1, until: {turnEnded: {agent: root, turn: 1}}}
agents:
  root:
    replies:
      - toolCalls:
          - {id: start-alpha, name: subagent, arguments: {label: alpha, prompt: Reply with ALPHA.}}
      - toolCalls:
          - {id: list-running, name: list_agents, arguments: {}}
      - text: LISTED
      - toolCalls:
          - {id: list-settled, name: list_agents, arguments: {scope: descendants}}
      - text: DONE
  alpha:
    spawnedBy: start-alpha
    replies:
      - text: ALPHA
"""


async def test_list_agents_gives_the_local_engines_rows_running_then_ready(client: Client, tmp_path: Path) -> None:
    script = tmp_path / "list-agents.yaml"
    script.write_text(LIST_AGENTS)
    local, temporal = await both_engines(client, str(script), tmp_path)
    assert temporal.result.violations == []
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    assert temporal.flow == local
    root = temporal.result.root_session_id
    events = SessionStore(tmp_path / "temporal").read(root).events
    listed = [str(e["data"]["message"]["content"]) for e in events if e["type"] == "tool/result"][1:]
    assert "| running | alpha" in listed[0] and "| ready | alpha | parent " in listed[1]


async def test_a_prefixless_hang_aborted_on_temporal_counts_as_served_as_on_the_local_engine(
    client: Client, tmp_path: Path
) -> None:
    """interrupt-parked-resume with the worker's hang without a prefix (loader/hang_note.py):
    each turn activity rebuilds the replay cursors from the log, where the aborted hang left no
    answer; the turn notes the hang it reached, so the worker's next turn is served B_OK, not the
    same hang (the tree hung before), and no reply is counted unconsumed. The stream is the local
    engine's, the note in both."""
    spec = yaml.safe_load(load_transcript("interrupt-parked-resume").path.read_text())
    [hang] = [r for r in spec["agents"]["worker"]["replies"] if "hang" in r]
    hang["hang"] = {}
    path = tmp_path / "interrupt-parked-resume.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    plan = plan_flow(str(path))
    local = await arun_flow(plan, home=tmp_path / "local")
    temporal = await asyncio.wait_for(run_temporal(client, plan, tmp_path / "temporal"), 60)
    assert temporal.result.violations == [] and temporal.result.exit_code == 0
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    assert temporal.flow == local
    notes = [e["data"] for p in (tmp_path / "temporal" / "sessions").glob("*/session.jsonl")
             for e in SessionStore(tmp_path / "temporal").read(p.parent.name).events if e["type"] == HANG_REACHED_EVENT]
    assert notes == [{"turn": 1, "step": 1}]
    # Both engines write the note and both streams carry it, as they carry the rest of the log.
    # Where it falls among the worker's inserts is the engine's (on Temporal the queued B may be
    # spliced before the hang is reached), so the rest is compared without it and without `seq`.
    local_records = await records_of(plan, tmp_path / "local-records")
    remote_records = await records_of(plan, tmp_path / "temporal-records", client)
    for records in (local_records, remote_records):
        assert [r["event"]["data"] for r in records
                if r["type"] == "event" and r["event"]["type"] == HANG_REACHED_EVENT] == [{"turn": 1, "step": 1}]
    assert unseq(comparable(unnoted(remote_records))) == unseq(comparable(unnoted(local_records)))


def unnoted(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] != "event" or r["event"]["type"] != HANG_REACHED_EVENT]


def unseq(value: Any) -> Any:
    """`value` without the events' `seq`."""
    if isinstance(value, dict):
        return {k: unseq(v) for k, v in value.items() if k != "seq"}
    if isinstance(value, list):
        return [unseq(v) for v in value]
    return value


@pytest.mark.parametrize("name", ["user-interrupt", "user-send"])
async def test_a_transcripts_user_is_done_from_the_client_as_the_local_runner_does_it(
    client: Client, name: str, tmp_path: Path
) -> None:
    """The `user` list (loader/engines/remote_user.py): its conditions read from the root's fence
    board, its `dsh interrupt` / `dsh send` made through the client with the user's authority; the
    tree gives the local engine's facts and flow, every action made once, no violation."""
    plan = plan_flow(str(Path(__file__).parent.parent / "replay" / f"{name}.yaml"))
    local = await arun_flow(plan, home=tmp_path / "local")
    temporal = await asyncio.wait_for(run_temporal(client, plan, tmp_path / "temporal"), 60)
    assert temporal.result.violations == [] and temporal.result.exit_code == 0
    assert settlement_facts(temporal.flow) == settlement_facts(local)
    assert temporal.flow == local
