"""A root cancelled by hand (`temporal workflow cancel`, `handle.cancel()`; issue 12, engines README
"Not yet" item 6, ROOT_CANCEL_PATCH): the tree stops as a local run stops on a first SIGINT
(`RunRequest.stop`). Its running turn hears the interrupt {kind: user} and ends in its log; every
resident child is released, child-first; each notice enters its parent's log once; the run ends
with stop reason `aborted` and the last turn's output; no workflow of the tree is left running.

The tree: root starts c, c starts g, g hangs in its first request (after a prefix), c's first turn ends and c waits
on g. Idle: the root's first turn ends too (`STARTED`), and the root waits on c. Mid-turn: the
root's next request hangs as well. Once every hang is reached (and, idle, the root's first turn
has ended), the local run is stopped and the Temporal root cancelled; both are compared.
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
from test_hand_ended import hangs_reached, ids, label, notices_in, turn_ends, turn_taken

from dsh.loader.agent import Agent
from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.testing.runner import plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0


def script(tmp_path: Path, *, root_hangs: bool) -> Path:
    root: list[dict[str, Any]] = [
        {"toolCalls": [{"id": "r1", "name": "subagent", "arguments": {"label": "c", "prompt": "Start g."}}]},
        {"hang": {"text": "ROOT_WORKING"}} if root_hangs else {"text": "STARTED"}]
    c = [{"toolCalls": [{"id": "c1", "name": "subagent", "arguments": {"label": "g", "prompt": "Work."}}]},
         {"text": "C_STARTED"}]
    path = tmp_path / "root-cancel.json"
    path.write_text(json.dumps({"version": 1, "name": "root-cancel", "task": "Start c.", "agents": {
        "root": {"replies": root}, "c": {"spawnedBy": "r1", "replies": c},
        "g": {"spawnedBy": "c1", "replies": [{"hang": {"text": "G_WORKING"}}]}}}))
    return path


def shape(home: Path) -> dict[str, Any]:
    """Per agent (by label): its turn ends, and the notices its log holds."""
    out: dict[str, Any] = {}
    for sid in ids(home):
        out[label(home, sid) or "root"] = {"ends": turn_ends(home, sid), "notices": notices_in(home, sid)}
    return out


async def local_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root_hangs: bool) -> tuple[RunResult, Path]:
    """The local engine, stopped (a first SIGINT) at the point the Temporal root is cancelled."""
    plan = plan_flow(script(tmp_path, root_hangs=root_hangs))
    hanging = hangs_reached(monkeypatch, 2 if root_hangs else 1)
    ended = asyncio.Event()
    stop = asyncio.Event()

    def on_agent(agent: Agent) -> None:
        if agent.session.header.get("parentSession") is None:
            agent.session.subscribe(lambda e: ended.set() if e["type"] == "turn/end" else None)

    async def stopper() -> None:
        await hanging.wait()
        if not root_hangs:
            await ended.wait()
        stop.set()

    home = tmp_path / "local"
    request = RunRequest(home=home, config=plan.config, transcript=plan.script, fences_allowed=True, stop=stop,
                         agent_hooks=[on_agent])
    stopping = asyncio.ensure_future(stopper())
    result = await asyncio.wait_for(run_tree(request), BACKSTOP)
    await stopping
    return result, home


async def temporal_run(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       root_hangs: bool) -> tuple[RunResult, Path]:
    plan = plan_flow(script(tmp_path, root_hangs=root_hangs))
    hanging = hangs_reached(monkeypatch, 2 if root_hangs else 1)
    home = tmp_path / "temporal"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    started: list[str] = []
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    request.sinks.on_started = started.append

    async def cancel_root() -> None:
        await asyncio.wait_for(hanging.wait(), BACKSTOP)
        handle = client.get_workflow_handle(started[0])
        [c] = [i for i in ids(home) if label(home, i) == "c"]
        await turn_taken(client.get_workflow_handle(f"{started[0]}/{c}"))  # c's first turn has ended: it waits on g
        if not root_hangs:
            await turn_taken(handle)  # the root's first turn has ended: it waits on c
        await handle.cancel()

    async with make_worker(client, queue):
        canceller = asyncio.ensure_future(cancel_root())
        result = await asyncio.wait_for(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client),
                                        BACKSTOP)
        await canceller
    return result, home


@pytest.mark.parametrize("root_hangs", [pytest.param(False, id="idle"), pytest.param(True, id="mid-turn")])
async def test_a_root_cancelled_by_hand_stops_its_tree_as_a_local_run_stopped_by_a_signal(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root_hangs: bool
) -> None:
    local, local_home = await local_run(tmp_path, monkeypatch, root_hangs)
    result, home = await temporal_run(client, tmp_path, monkeypatch, root_hangs)
    assert result.violations == local.violations == [], (result.violations, local.violations)
    assert (result.stop_reason, result.output, result.exit_code) == (local.stop_reason, local.output, local.exit_code)
    assert result.stop_reason == "aborted"
    # Every log ends as the local stop ends it; each notice entered its parent once.
    assert shape(home) == shape(local_home)
    seen = shape(home)
    assert seen["g"]["ends"] == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    # g's notice entered c, c's the root, each once and as an inject (both were closing).
    assert seen["c"] == {"ends": [{"kind": "completed"}], "notices": [("g", "aborted", "next-step")]}
    assert seen["root"]["notices"] == [("c", "completed", "next-step")]
    # The root's running turn heard the user's interrupt through its poll (not a cut-off activity).
    assert seen["root"]["ends"] == [{"kind": "aborted", "reason": {"kind": "user"}} if root_hangs else {"kind": "completed"}]
    await assert_nothing_running(client, result.root_session_id)
    await replays_and_kept(client, result.root_session_id, f"cancelled-root-{'mid-turn' if root_hangs else 'idle'}.0.json")
