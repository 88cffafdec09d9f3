"""A root whose turn fails for good while a child is resident (issue 12 "Not yet" item 0;
loader/engines/README.md "Failed child runs"): the tree is drained as the local engine drains a run
that ends with children resident (SPEC §8.12), then the root's run fails and the client says why.

root starts c; c reports (waking the root's second turn), then hangs in its next request; the
root's second turn fails for good (the worker refuses it: MISSING_API_KEY, non-retryable). On the
local engine the same tree ends by a stop once the root's second turn ended `error` (a provider
error): `drain_descendants` cancels c ({kind: parent}), its turn ends `aborted`, and its notice
enters the closing root as an inject. Before the fix the root's run failed at once: c (started
ABANDON) hung on, its workflow running, and its notice went to a closed run (lost).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import assert_nothing_running, backstopped, client, replays_and_kept  # noqa: F401  (client: the module's dev-server fixture)
from temporalio.client import Client

from dsh.loader.agent import Agent
from dsh.loader.config import TemporalConfig
from dsh.loader.engines import worker
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.wire import TurnInput, TurnResult
from dsh.loader.engines.worker import make_worker
from dsh.loader.errors import ConfigError
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.models import ReplayProvider
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0


def script(tmp_path: Path, *, local: bool) -> Path:
    """c's report wakes the root's second turn only after its first (a fence); locally that turn
    waits until c's hang is reached (a fence; on Temporal the refusal waits for it, an event), so
    in both c's turn is in its hanging request when the drain comes."""
    root = [{"toolCalls": [{"id": "r1", "name": "subagent", "arguments": {"label": "c", "prompt": "Report, then work."}}]},
            {"text": "STARTED"},
            {"error": {"code": "PROVIDER_ERROR", "message": "boom"}}]
    if not local:
        root = root[:2]  # the worker refuses the second turn before it asks for a reply
    c = [{"toolCalls": [{"id": "c1", "name": "report", "arguments": {"output": "R1"}}]}, {"hang": {}}]
    fences: list[dict[str, Any]] = [
        {"hold": {"agent": "c", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "root", "turn": 1}}}}]
    if local:
        fences.append({"hold": {"agent": "root", "turn": 2, "step": 1, "until": {"hangReached": {"agent": "c"}}}})
    path = tmp_path / ("local.json" if local else "temporal.json")
    path.write_text(json.dumps({"version": 1, "name": "failed-root", "task": "Start c.", "fences": fences, "agents": {
        "root": {"replies": root}, "c": {"spawnedBy": "r1", "replies": c}}}))
    return path


async def local_run(tmp_path: Path) -> Path:
    """The local engine: stopped (as a first SIGINT) once the root's second turn ended."""
    plan = plan_flow(script(tmp_path, local=True))
    stop = asyncio.Event()

    def on_root(agent: Agent) -> None:
        if agent.session.header.get("parentSession") is None:
            agent.session.subscribe(lambda e: stop.set() if e["type"] == "turn/end" and e["data"]["turn"] == 2 else None)

    home = tmp_path / "local"
    request = RunRequest(home=home, config=plan.config, transcript=plan.script, fences_allowed=True, stop=stop,
                         agent_hooks=[on_root])
    result = await asyncio.wait_for(run_tree(request), BACKSTOP)
    assert result.violations == [], result.violations
    return home


def refuse_the_roots_second_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The in-process worker refuses the root's second turn for good, once c's hang is reached."""
    hanging = asyncio.Event()
    real_turn, real_reach = worker.run_turn, ReplayProvider._reach_hang

    def reach(self: ReplayProvider, key: str) -> None:
        real_reach(self, key)
        hanging.set()

    async def ordered(spec: TurnInput, *args: Any, **kwargs: Any) -> TurnResult:
        if spec.agent.parent_id is None and spec.seq == 1:
            await asyncio.wait_for(hanging.wait(), BACKSTOP)
            raise ConfigError("this worker has no key for the root's turn", code="MISSING_API_KEY")
        return await real_turn(spec, *args, **kwargs)

    monkeypatch.setattr(ReplayProvider, "_reach_hang", reach)
    monkeypatch.setattr(worker, "run_turn", ordered)


def sessions(home: Path) -> tuple[str, str]:
    """(root, c) by their headers."""
    store = SessionStore(home)
    ids = [p.parent.name for p in (home / "sessions").glob("*/session.jsonl")]
    [root] = [i for i in ids if store.read(i).header.get("parentSession") is None]
    [c] = [i for i in ids if i != root]
    return root, c


def shape(events: list[dict[str, Any]]) -> list[Any]:
    """Event types, with each turn end's reason (ids and clocks aside); not the Temporal engine's
    own notes (`engine/*`: here c's prefix-less hang reached, hang_note.py)."""
    return [(e["type"], e["data"]["reason"]) if e["type"] == "turn/end" else e["type"] for e in events
            if not e["type"].startswith("engine/")]


def entered_notices(events: list[dict[str, Any]], child: str) -> list[tuple[str, str, str, bool]]:
    """Each notice the log holds: (sender, stop reason, target lane, after the log's last turn end)."""
    last_end = max(i for i, e in enumerate(events) if e["type"] == "turn/end")
    return [(m["source"]["senderSessionId"].replace(child, "c"), m["source"]["stopReason"], e["data"]["target"], i > last_end)
            for i, e in enumerate(events) if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled"]


async def test_a_root_whose_turn_fails_for_good_drains_its_children_as_the_local_engine_then_fails(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = await local_run(tmp_path)
    local_root, local_c = sessions(local)
    store = SessionStore(local)
    refuse_the_roots_second_turn(monkeypatch)
    plan = plan_flow(script(tmp_path, local=False))
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with make_worker(client, queue):
        with pytest.raises(ConfigError) as failed:  # the run fails as before, and the client says why
            await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client), BACKSTOP)
    assert failed.value.code == "MISSING_API_KEY"
    root, c = sessions(home)
    there = SessionStore(home)
    # c's log ends as the local drain ends it: its hanging turn aborted by the parent's cancel.
    assert shape(there.read(c).events) == shape(store.read(local_c).events)
    assert there.read(c).events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "parent"}}
    # c's notice entered the root once, as an inject after its last turn (the closing root's).
    assert entered_notices(there.read(root).events, c) == entered_notices(store.read(local_root).events, local_c) == [
        ("c", "aborted", "next-step", True)]
    # What the refused turn was handed (c's report) is in the root's log too, unread.
    reports = [m for e in there.read(root).events if e["type"] == "agent/inbox/spliced"
               for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-report"]
    assert len(reports) == 1
    # The root's run (the refused turn, the drain, the leftovers) replays; committed for test_replay.py.
    await replays_and_kept(client, root, "failed-root-drains.0.json")
    # No workflow of the tree is left running (c's included).
    await assert_nothing_running(client, root)
