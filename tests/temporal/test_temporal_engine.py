"""The Temporal engine against the local one (issue 12 item 4): one test per shipped transcript runs
it on both engines, keylessly, and compares the settlement facts (each agent's turn ends and stop
reasons, which notices and reports reach which parent with their texts, the final output) — and,
since the replay is deterministic on both, the whole normalized flow.

One dev server serves the module (its start is most of a test's cost); each test has its own task
queue, worker and homes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporal_kit import both_engines, dev_server, run_temporal, settlement_facts
from temporalio.client import Client

from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import FlowPlan, arun_flow, plan_flow
from dsh.loader.transcripts import load_transcript

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHIPPED = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "transcripts").glob("*.yaml"))
# A demo for `dsh interrupt` by hand: it parks until someone interrupts it, on either engine.
MANUAL = {"interrupt-demo"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[Client]:
    async with dev_server() as c:
        yield c


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
    plan = plan_flow("interrupt-parked-resume")
    temporal_config = plan.config.temporal.model_copy(update={"continue_as_new_after": 1})
    plan = FlowPlan(script=plan.script, config=plan.config.model_copy(update={"temporal": temporal_config}))
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
    carried = json.loads(started.input.payloads[0].data)["carried"]
    assert carried["runs"] == 2 and len(carried["parked"]) == 2  # B and C, kept parked across the runs


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
