"""A child whose workflow run fails still settles its parent (promise 1; loader/engines/README.md
"Failed child runs"): once, with an `error` notice read from the child's log, and a later
`send_message` cold-resumes it as any settled child.

Two causes of a failed run, each in the in-process worker: a result over Temporal's 2 MB payload
limit (the turn's notice bound raised past a 3 MB reply: PayloadsTooLarge), and a non-retryable
error of the turn activity (a worker whose configuration refuses the turn: MISSING_API_KEY). Before
the fix both hung: the parent's `_settled` had no failure path, the child stayed resident and the
root never closed (the 120 s backstop is the loud failure).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import client, run_temporal  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client

from dsh.loader.engines import calls, settle, turn, worker
from dsh.loader.engines.settle import FAILED_CODE, settle_failed
from dsh.loader.engines.wire import FailedRun, TurnInput, TurnResult
from dsh.loader.errors import ConfigError
from dsh.loader.session import SessionStore, make_header
from dsh.loader.subagents import notice_id
from dsh.loader.testing.runner import arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0
BIG = "x" * (3 * 1024 * 1024)
QUICK_RETRY = timedelta(milliseconds=100)


def script(tmp_path: Path, child_replies: list[dict[str, Any]], resumed_turn: int) -> Path:
    """The root starts a child and, once its (failed) epoch 1 settled, messages it again: epoch 2
    runs as the child's turn `resumed_turn` and settles `completed`, after the root's second turn
    (a fence). Epoch 1 starts after the root's first turn (`after_the_roots_first_turn`): a fence
    there would engage in a run whose result is lost, and read as unused."""
    root = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "Work."}}]},
            {"text": "STARTED"},
            {"toolCalls": [{"id": "c2", "name": "send_message",
                            "arguments": {"agent_id": "{{child:c1}}", "message": "Again."}}]},
            {"text": "SENT"},
            {"text": "DONE"}]
    fences = [{"hold": {"agent": "w", "turn": resumed_turn, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 2}}}}]
    path = tmp_path / "failed-child.json"
    path.write_text(json.dumps({"version": 1, "name": "failed-child", "task": "Start a child.", "fences": fences,
                                "agents": {"root": {"replies": root}, "w": {"spawnedBy": "c1", "replies": child_replies}}}))
    return path


def notices(store: SessionStore, root: str) -> list[dict[str, Any]]:
    return [m for e in store.read(root).events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]


def epoch_one_end(store: SessionStore, child: str) -> list[dict[str, Any]]:
    """The child's events of epoch 1 (up to the marker of epoch 2)."""
    events = store.read(child).events
    second = next(i for i, e in enumerate(events) if e["type"] == "subagent/epoch" and e["data"]["epoch"] == 2)
    return events[:second]


async def local_error_end(tmp_path: Path) -> list[Any]:
    """How the local engine's log of a child that ended `error` ends: the event types and the
    shape of the reason, compared with what the failed run's settlement writes."""
    path = tmp_path / "local-error.json"
    path.write_text(json.dumps({"version": 1, "name": "local-error", "task": "Start a child.", "agents": {
        "root": {"replies": [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "Fail."}}]},
                             {"text": "STARTED"}, {"text": "NOTED"}]},
        "w": {"spawnedBy": "c1", "replies": [{"error": {"code": "PROVIDER_ERROR", "message": "boom"}}]}}}))
    home = tmp_path / "local"
    await arun_flow(plan_flow(path), home=home)
    store = SessionStore(home)
    [child] = [p.parent.name for p in (home / "sessions").glob("*/session.jsonl")
               if store.read(p.parent.name).header.get("parentSession") is not None]
    return shape(store.read(child).events)


def shape(events: list[dict[str, Any]]) -> list[Any]:
    end = events[-1]
    reason = end["data"]["reason"]
    return [[e["type"] for e in events[-2:]], sorted(reason), reason["kind"], sorted(reason["error"])]


def after_the_roots_first_turn(monkeypatch: pytest.MonkeyPatch, *, refuse: bool) -> None:
    """The in-process worker's turns: the child's epoch 1 waits for the root's first turn to end
    (an event, so its notice comes after that turn), then runs, or with `refuse` is refused by
    the worker (MISSING_API_KEY: a non-retryable activity failure) before it writes a turn."""
    root_turn_ended = asyncio.Event()
    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        if spec.agent.parent_id is not None and spec.agent.epoch == 1:
            await asyncio.wait_for(root_turn_ended.wait(), BACKSTOP)
            if refuse:
                raise ConfigError("this worker has no key for the child", code="MISSING_API_KEY")
        result = await real(spec, *args, **kwargs)
        if spec.agent.parent_id is None:
            root_turn_ended.set()
        return result

    monkeypatch.setattr(worker, "run_turn", ordered)


async def check_settled_and_resumed(client: Client, tmp_path: Path, path: Path, *, big: bool) -> None:
    home = tmp_path / "temporal"
    run = await asyncio.wait_for(run_temporal(client, plan_flow(path), home), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "DONE", [], 0)
    store = SessionStore(home)
    [child] = [s["sessionId"] for s in result.subagents]
    found = notices(store, result.root_session_id)
    # One notice per epoch, each once: epoch 1's `error` (the failed run), epoch 2's `completed`.
    assert [(n["source"]["senderSessionId"], n["source"]["stopReason"]) for n in found] == [
        (child, "error"), (child, "completed")]
    failed = found[0]
    assert failed["id"] == notice_id(child, 1) and failed["source"]["error"]["code"] == FAILED_CODE
    text = "".join(block["text"] for block in failed["content"])
    assert f"dsh sessions show {child}" in text
    if big:  # the failed epoch's last reply is in the log, and too large for the notice
        assert BIG not in text and "bytes, more than a Temporal payload carries" in text
    # The child's log ends epoch 1 as the local engine's does for an error end, with the failure.
    ended = epoch_one_end(store, child)
    assert shape(ended) == await local_error_end(tmp_path)
    assert ended[-1]["data"]["reason"]["error"]["code"] == FAILED_CODE
    assert [e["data"]["epoch"] for e in store.read(child).events if e["type"] == "subagent/epoch"] == [1, 2]
    # Epoch 2 is a cold resume: the next run under the one id `<root>/<child>`.
    history = await client.get_workflow_handle(f"{result.root_session_id}/{child}").fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert json.loads(started.input.payloads[0].data)["epoch"] == 2


async def test_a_child_run_failed_by_a_result_over_the_payload_limit_settles_once_with_an_error_notice(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The turn's own bound lifted past the 3 MB reply: its result fails the run (PayloadsTooLarge).
    monkeypatch.setattr(turn, "NOTICE_LIMIT", 64 * 1024 * 1024)
    # All five attempts fail so, 0.1 s apart and doubling instead of 1 s (the workflow module takes
    # the policy as the sandbox imports it for each run).
    monkeypatch.setattr(calls, "TURN_RETRY", dataclasses.replace(calls.TURN_RETRY, initial_interval=QUICK_RETRY))
    after_the_roots_first_turn(monkeypatch, refuse=False)
    path = script(tmp_path, [{"text": BIG}, {"text": "AGAIN_OK"}], resumed_turn=3)
    await check_settled_and_resumed(client, tmp_path, path, big=True)


async def test_a_child_run_failed_by_a_non_retryable_turn_error_settles_once_with_an_error_notice(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The child's first turn is refused by the worker; its epoch 2 runs normally.
    after_the_roots_first_turn(monkeypatch, refuse=True)
    path = script(tmp_path, [{"text": "AGAIN_OK"}], resumed_turn=2)
    await check_settled_and_resumed(client, tmp_path, path, big=False)


async def test_settling_a_failed_run_closes_its_cut_off_turn_with_the_error_once(tmp_path: Path) -> None:
    # The failure cut a turn off mid-step (its worker gave up): crash repair closes it, the
    # settlement ends the epoch `error`; a retried settlement appends nothing and gives the same notice.
    store = SessionStore(tmp_path)
    parent, child = "session-00000000-0000-4000-8000-000000000001", "session-00000000-0000-4000-8000-000000000002"
    session = await store.create(make_header(child, parent_session=parent, origin="subagent", delegation_depth=1))
    session.append("subagent/epoch", {"epoch": 1}, ignorable=True)
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    await store.close(session)
    failed = FailedRun(home=str(tmp_path), child_id=child, epoch=1, failure="activity failed: boom")
    first = await settle_failed(failed)
    events = store.read(child).events
    again = await settle_failed(failed)
    assert store.read(child).events == events  # written once
    assert first == again and first.stop_reason == "error" and first.notice is not None
    assert first.notice["id"] == notice_id(child, 1)
    assert first.notice["source"]["error"]["code"] == FAILED_CODE and "boom" in first.notice["source"]["error"]["message"]
    kinds = [(e["type"], (e["data"].get("reason") or {}).get("kind")) for e in events if e["type"] == "turn/end"]
    assert kinds == [("turn/end", "interrupted"), ("turn/end", "error")]  # repair, then the settlement
    assert settle.NOTICE_LIMIT == turn.NOTICE_LIMIT  # one bound for both notices


async def test_a_child_run_failing_after_its_parent_continued_as_new_still_settles_it_once(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root starts w1..w3 and continues as new every few updates, so the run that started w2
    (and holds its handle) has closed when w2's turn is refused for good: the failure reaches no
    run, and only w2's own run, settling its epoch from its log and signalling the parent's current
    run, tells the root. Before, the tree waited forever (the backstop)."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}."}}
             for i in (1, 2, 3)]
    root = [{"toolCalls": calls}, {"text": "STARTED"}, *({"text": f"NOTED{i}"} for i in (1, 2, 3))]
    fences = [{"hold": {"agent": f"w{i}", "until": {"turnEnded": {"agent": "root", "turn": i}}}} for i in (1, 3)]
    path = tmp_path / "failing-chain.json"
    path.write_text(json.dumps({"version": 1, "name": "failing-chain", "task": "Start a chain.", "fences": fences,
                                "agents": {"root": {"replies": root},
                                           **{f"w{i}": {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]}
                                              for i in (1, 2, 3)}}}))
    root_turns = 0
    second_ended = asyncio.Event()
    real = worker.run_turn

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        nonlocal root_turns
        if (spec.agent.descriptor or {}).get("label") == "w2":
            await asyncio.wait_for(second_ended.wait(), BACKSTOP)  # after root turn 2: runs have changed
            raise ConfigError("this worker has no key for the child", code="MISSING_API_KEY")
        result = await real(spec, *args, **kwargs)
        if spec.agent.parent_id is None:
            root_turns += 1
            if root_turns == 2:
                second_ended.set()
        return result

    monkeypatch.setattr(worker, "run_turn", ordered)
    plan = plan_flow(path)
    plan = dataclasses.replace(plan, config=plan.config.model_copy(
        update={"temporal": plan.config.temporal.model_copy(update={"continue_as_new_updates": 3})}))
    home = tmp_path / "temporal"
    run = await asyncio.wait_for(run_temporal(client, plan, home), BACKSTOP)
    result = run.result
    assert (result.stop_reason, result.output) == ("completed", "NOTED3")
    # w2's one reply is never asked for: its turn was refused before it ran.
    assert [(v["code"], v.get("agent")) for v in result.violations] == [("REPLAY_UNCONSUMED", "w2")]
    store = SessionStore(home)
    labels = {m["source"]["senderSessionId"]: m["source"]["stopReason"] for m in notices(store, result.root_session_id)}
    assert sorted(labels.values()) == ["completed", "completed", "error"]
    [failed] = [n for n in notices(store, result.root_session_id) if n["source"]["stopReason"] == "error"]
    assert failed["source"]["error"]["code"] == FAILED_CODE
    assert failed["id"] == notice_id(failed["source"]["senderSessionId"], 1)
    # w2 was resident across a continue-as-new: a later run of the root carried it.
    w2 = failed["source"]["senderSessionId"]
    carried: list[str] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(result.root_session_id, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        carried += (json.loads(started.input.payloads[0].data).get("carried") or {}).get("resident") or []
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            break
    assert w2 in carried
    assert sorted(s["label"] for s in result.subagents) == ["w1", "w2", "w3"], result.subagents
