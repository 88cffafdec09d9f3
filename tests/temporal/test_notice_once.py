"""A child's notice is entered once by its parent's workflow (loader/engines/README.md
"Continue-as-new"): since the root may continue as new with children resident, a child's result
reaches its parent twice, as signal `settled` to the parent's current run and as the child's
result to the run that started it. `_settle` enters a notice id once.

Here the duplicate is sent by hand to a live root: w1's result (its notice as the root's log
holds it), signalled again after the root's turn for w1's notice has ended, while w2 is still
resident (held by an event until the signal is sent). Entered twice, it would wake the root for one more turn activity than its log
has turns (the turn finds the message in the log and has nothing to do).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import client, run_temporal, turn_started  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client

from dsh.loader.engines import worker
from dsh.loader.engines.wire import TreeResult, TurnInput, TurnResult
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0


def notices(home: Path, root: str) -> list[dict[str, Any]]:
    return [m for e in SessionStore(home).read(root).events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]


async def test_a_notice_signalled_again_to_a_live_parent_is_entered_once(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in (1, 2)]
    path = tmp_path / "twice.json"
    path.write_text(json.dumps({"version": 1, "name": "twice", "task": "Start two.", "fences": [
        {"hold": {"agent": "w1", "until": {"turnEnded": {"agent": "root", "turn": 1}}}}], "agents": {
        "root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "NOTED1"}, {"text": "NOTED2"}]},
        "w1": {"spawnedBy": "c1", "replies": [{"text": "W1_DONE"}]},
        "w2": {"spawnedBy": "c2", "replies": [{"text": "W2_DONE"}]}}}))
    ids: dict[str, str] = {}
    home = tmp_path / "temporal"
    root_turns = 0
    w1_noted, duplicate_sent = asyncio.Event(), asyncio.Event()
    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        nonlocal root_turns
        label = (spec.agent.descriptor or {}).get("label")
        if label is not None:
            ids[label] = spec.agent.session_id
        if label == "w2":
            await asyncio.wait_for(duplicate_sent.wait(), BACKSTOP)
        result = await real(spec, *args, **kwargs)
        if spec.agent.parent_id is None:
            ids["root"] = spec.agent.session_id
            root_turns += 1
            if root_turns == 2:  # the turn w1's notice opened
                w1_noted.set()
        return result

    async def duplicate() -> None:
        await asyncio.wait_for(w1_noted.wait(), BACKSTOP)
        # w1's result as its run returned it: its notice, as the root's log holds it.
        [notice] = [m for m in notices(home, ids["root"]) if m["source"]["senderSessionId"] == ids["w1"]]
        settled = TreeResult(session_id=ids["w1"], stop_reason="completed", notice=notice, agent_key="w1", epoch=1)
        await client.get_workflow_handle(ids["root"]).signal("settled", settled)
        duplicate_sent.set()

    monkeypatch.setattr(worker, "run_turn", ordered)
    sender = asyncio.create_task(duplicate())
    run = await asyncio.wait_for(run_temporal(client, plan_flow(path), home), BACKSTOP)
    await sender
    result = run.result
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "NOTED2", [], 0)
    events = SessionStore(home).read(result.root_session_id).events
    senders = [m["source"]["senderSessionId"] for m in notices(home, result.root_session_id)]
    assert senders == [ids["w1"], ids["w2"]]
    history = await client.get_workflow_handle(result.root_session_id).fetch_history()
    activities = sum(turn_started(e) for e in history.events)  # turns begun: activities or turn workflows
    assert activities == root_turns == sum(e["type"] == "turn/start" for e in events) == 3
