"""A child whose turn fails for good while its own child is resident (issue 12 "Not yet" item 0;
loader/engines/README.md "Failed child runs"): the tree root → c → g, c's second turn failing
while g is resident, gives the local engine's settlement facts on Temporal.

On the local engine c's turn ends `error` (a provider error) and c stays resident, since it owns
g (SPEC §8.10: state `waiting`); g's notice reaches c, which runs a turn for it and only then
settles, and c's notice reaches the root. On Temporal the failure is the worker refusing c's turn
(MISSING_API_KEY, a non-retryable activity failure). Before the fix c's run failed there and then:
the root heard c's `error`, g lived on (started ABANDON) and its notice went to a workflow id with
no running run (logged, lost), so c's last reply was never asked for (REPLAY_UNCONSUMED).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
import temporalio
from temporal_kit import assert_nothing_running, client, run_temporal, settlement_facts  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client
from temporalio.worker import Replayer

from dsh.loader.engines import worker
from dsh.loader.engines.settle import FAILED_CODE
from dsh.loader.engines.wire import TurnInput, TurnResult
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.errors import ConfigError
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0
# c's history of the first test, committed for test_replay.py (FAILED_TURN_PATCH's path): written
# when this is set, e.g. `DSH_RECORD_HISTORIES=1 pytest -n 0 tests/temporal/test_failed_child_tree.py`.
HISTORY = Path(__file__).parent / "histories" / "failed-turn-with-child.1.json"


def script(tmp_path: Path, *, local: bool) -> Path:
    """root starts c and, once c's first turn ended, sends it a follow-up; c starts g; c's second
    turn (the follow-up's) fails while g is resident; g's notice wakes c's third turn (C_DONE),
    after the root's first turn. Locally the failure is a provider error reply and a fence holds
    g until it; on Temporal the worker refuses the turn before it asks for a reply, and the test
    holds g's turn until then (a turn refused publishes no fence fact). What the refused turn was
    handed is not lost: c's next turn reads it first."""
    root = [{"toolCalls": [{"id": "r1", "name": "subagent", "arguments": {"label": "c", "prompt": "Start g."}}]},
            {"toolCalls": [{"id": "r2", "name": "send_message",
                            "arguments": {"agent_id": "{{child:r1}}", "message": "Go on."}}]},
            {"text": "SENT"},
            {"text": "DONE"}]
    c = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "g", "prompt": "Work."}}]},
         {"text": "C_STARTED"},
         # Locally turn 2 reads "Go on." and fails; on Temporal the refused turn read nothing, so
         # turn 3 reads the follow-up (its first step) before g's notice (its second).
         {"error": {"code": "PROVIDER_ERROR", "message": "boom"}} if local else {"text": "C_GOING"},
         {"text": "C_DONE"}]
    fences: list[dict[str, Any]] = [
        {"hold": {"agent": "root", "turn": 1, "step": 2, "until": {"turnEnded": {"agent": "c", "turn": 1}}}},
        {"hold": {"agent": "c", "turn": 3, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}},
    ]
    if local:
        fences.append({"hold": {"agent": "g", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "c", "turn": 2}}}})
    path = tmp_path / ("local.json" if local else "temporal.json")
    path.write_text(json.dumps({"version": 1, "name": "failed-child-tree", "task": "Start c.", "fences": fences, "agents": {
        "root": {"replies": root}, "c": {"spawnedBy": "r1", "replies": c},
        "g": {"spawnedBy": "c1", "replies": [{"text": "G_DONE"}]}}}))
    return path


def refuse_cs_second_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process worker refuses c's second turn for good; g's turn waits until it did."""
    refused = asyncio.Event()
    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        label = (spec.agent.descriptor or {}).get("label")
        if label == "g":
            await asyncio.wait_for(refused.wait(), BACKSTOP)
        if label == "c" and spec.seq == 1:
            refused.set()
            raise ConfigError("this worker has no key for c's turn", code="MISSING_API_KEY")
        return await real(spec, *args, **kwargs)

    monkeypatch.setattr(worker, "run_turn", ordered)


def turn_kinds(facts: dict[str, Any]) -> dict[str, list[Any]]:
    """Per agent its turn ends' kinds (the error's code is the engine's: a provider error locally,
    ENGINE_RUN_FAILED on Temporal)."""
    return {agent: [(end or {}).get("kind") if isinstance(end, dict) else end for end in ends]
            for agent, ends in facts["turn_ends"].items()}


async def test_a_child_whose_turn_fails_with_its_child_resident_settles_as_on_the_local_engine(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = settlement_facts(await arun_flow(plan_flow(script(tmp_path, local=True)), home=tmp_path / "local"))
    refuse_cs_second_turn(monkeypatch)
    run = await asyncio.wait_for(run_temporal(client, plan_flow(script(tmp_path, local=False)), tmp_path / "t"), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.output, result.violations) == ("completed", "DONE", [])
    there = settlement_facts(run.flow)
    # Which notices reach which parent, with their stop reasons (sessions S1 root, S2 c, S3 g; positions 0, 0.1, 0.1.1): c's reaches
    # the root, g's reaches c (before: none from g).
    assert there["notices"] == local["notices"]
    assert sorted((n["from"], n["to"], n["stopReason"]) for n in there["notices"]) == [
        ("S2", "S1", "completed"), ("S3", "S2", "completed")], there["notices"]
    # Per agent the same turns with the same ends: c's second ends `error`, then its third runs.
    assert turn_kinds(there) == turn_kinds(local), (there["turn_ends"], local["turn_ends"])
    assert turn_kinds(there)["0.1"] == ["completed", "error", "completed"], there["turn_ends"]
    assert there["result"] == local["result"]
    store = SessionStore(tmp_path / "t")
    [c] = [s["sessionId"] for s in result.subagents if s["label"] == "c"]
    ends = [e["data"]["reason"] for e in store.read(c).events if e["type"] == "turn/end"]
    assert ends[1]["error"]["code"] == FAILED_CODE
    # c's run (the failed turn, its error end, the notice that woke the next) replays.
    history = await client.get_workflow_handle(f"{result.root_session_id}/{c}").fetch_history()
    assert (await Replayer(workflows=[AgentWorkflow]).replay_workflow(history)).replay_failure is None
    if os.environ.get("DSH_RECORD_HISTORIES"):
        text = json.dumps({"workflowId": history.workflow_id, "history": history.to_json_dict()}, indent=1) + "\n"
        # The failure's stack trace names this machine's paths: the committed file keeps none.
        for prefix in (f"{Path(temporalio.__file__).parent.parent}/", f"{Path(__file__).parents[2]}/"):
            text = text.replace(prefix, "")
        HISTORY.write_text(text)
    # The tree closed: no workflow of it is left running (g's included).
    await assert_nothing_running(client, result.root_session_id)


async def test_a_child_whose_turns_keep_failing_settles_once_after_its_child_and_never_loops(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every turn of c after its first is refused. What the refused turn was handed wakes no one
    again, so c's next turn is the one g's notice starts (it carries both); it fails too, with no
    child resident now, and c settles `error`, once. Without that, c ran a turn for the follow-up
    again at once, before g's notice: a loop of failing turns for as long as g is resident. g's
    turn waits until c's first failure is written (the settlement activity returned)."""
    written = asyncio.Event()
    handed: list[list[str]] = []
    real_turn, real_settle = worker.run_turn, worker.settle_failed

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        label = (spec.agent.descriptor or {}).get("label")
        if label == "g":
            await asyncio.wait_for(written.wait(), BACKSTOP)
        if label == "c" and spec.seq >= 1:
            handed.append([str(d.message["source"]["kind"]) for d in spec.deliveries])
            raise ConfigError("this worker has no key for c's turn", code="MISSING_API_KEY")
        return await real_turn(spec, *args, **kwargs)

    async def settling(failed: Any) -> Any:
        result = await real_settle(failed)
        written.set()
        return result

    monkeypatch.setattr(worker, "run_turn", ordered)
    monkeypatch.setattr(worker, "settle_failed", settling)
    path = script(tmp_path, local=False)
    spec = json.loads(path.read_text())
    spec["fences"] = spec["fences"][:1]  # c's third turn never runs: no fence on it
    spec["agents"]["root"]["replies"][-1] = {"text": "DONE"}
    path.write_text(json.dumps(spec))
    run = await asyncio.wait_for(run_temporal(client, plan_flow(path), tmp_path / "t"), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.output) == ("completed", "DONE")
    # c's refused turns: the follow-up's, then the one g's notice started, carrying both.
    assert handed == [["coordinator"], ["coordinator", "subagent-settled"]], handed
    facts = settlement_facts(run.flow)
    assert sorted((n["from"], n["to"], n["stopReason"]) for n in facts["notices"]) == [("S2", "S1", "error")]
    store = SessionStore(tmp_path / "t")
    [c] = [s["sessionId"] for s in result.subagents if s["label"] == "c"]
    ends = [e["data"]["reason"] for e in store.read(c).events if e["type"] == "turn/end"]
    assert [e["kind"] for e in ends] == ["completed", "error"]  # the failure's end, written once
    await assert_nothing_running(client, result.root_session_id)
