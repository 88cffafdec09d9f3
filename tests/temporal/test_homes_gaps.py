"""Homes: the gaps issue 12 left (loader/engines/README.md "Homes"), two homes in this process.

- A create activity whose worker failed after doing its work and before answering is retried on
  another home's worker: the session's log is made once, in the home the workflow was told (the
  claim writes nothing; the first turn, pinned there, makes the log), none on the first home.
- A parent in a later epoch cold-resumes a child of its earlier epoch whose home only that earlier
  run heard of (its own parent never did): the later run is told the homes its last run knew
  (`TreeResult.known_homes`), so the resume check finds the log and the child's next epoch runs
  on its home.
- Workers without a home: a session's create activity answers no home queue, and the session stays
  claimed: its later runs (continued as new) and epochs (cold-resumed) run none (CLAIM_KEPT_PATCH).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from killable_worker import KillableWorker
from temporal_kit import backstopped, client, comparable, records_of, run_temporal, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from test_homes import BACKSTOP, queues_of, run_ids, run_tree_temporal, sessions_in, tree_sessions
from test_temporal_engine import COLD_RESUME, continued_as_new

from dsh.loader.engines import worker as worker_module
from dsh.loader.engines.control import user_call
from dsh.loader.engines.homes import home_id, home_queue
from dsh.loader.engines.wire import Homed, TreeInput, agent_workflow_id
from dsh.loader.engines.worker import TurnActivities, make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.ndjson import RecordStream
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.runner import arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest.fixture(autouse=True)
def quick_sticky(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workflow whose worker left goes to the other worker after 1 s, not the SDK's 10 s
    (killable_worker.py: the same path, taken sooner)."""
    monkeypatch.setattr(worker_module, "Worker", KillableWorker)


async def own_client(client: Client) -> Client:
    """A client per worker (the SDK allows one worker per task queue and client)."""
    return await Client.connect(client.service_client.config.target_host, namespace=client.namespace)


def request_for(plan: Any, home: Path, records: list[dict[str, Any]]) -> RunRequest:
    sinks = RunSinks(records=RecordStream(records.append))
    return RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True,
                      sinks=sinks)


# -- a create activity retried after its worker did its work ----------------------------------------

async def test_a_create_retried_on_another_home_after_its_first_attempt_leaves_one_log_in_one_home(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker `a` alone takes the root's create activity, does all the activity does, then fails
    before answering (as a worker that died there) and leaves; a worker on `b` takes the retry.
    Every log of the tree is whole on b, none (not even a header) on a, and the stream is the
    local engine's."""
    plan = plan_flow("four-children-one-step")
    local = await records_of(plan, tmp_path / "local")
    a, b = tmp_path / "a", tmp_path / "b"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    failed = asyncio.Event()

    class FailsAfterItsWork(TurnActivities):
        @activity.defn(name="dsh.create_session")
        async def create_session(self, agent: TreeInput) -> Homed:
            answer = await super().create_session(agent)
            if not failed.is_set():
                failed.set()
                raise ApplicationError("the worker died before answering")
            return answer

    records: list[dict[str, Any]] = []
    with monkeypatch.context() as patched:
        patched.setattr(worker_module, "TurnActivities", FailsAfterItsWork)
        first = make_worker(await own_client(client), queue, home=a)
    await first.__aenter__()
    try:
        task = asyncio.ensure_future(run_tree_temporal(request_for(plan, tmp_path / "client", records), queue, client))
        await asyncio.wait_for(failed.wait(), BACKSTOP)
    finally:
        await first.__aexit__()
    async with make_worker(await own_client(client), queue, home=b):
        result = await asyncio.wait_for(task, BACKSTOP)
    records.append({"type": "result", **result.to_json()})
    assert comparable(records) == comparable(local)
    assert sessions_in(a) == set()
    assert sessions_in(b) == tree_sessions(records)
    scheduled = await queues_of(client, result.root_session_id)
    assert scheduled[0] == ("dsh.create_session", queue)
    assert all(q == home_queue(queue, home_id(b)) for _, q in scheduled[1:]), scheduled


# -- a later-epoch parent's children of its earlier epochs ------------------------------------------

# root -> mid -> par -> leaf. par's epoch 1 starts leaf; mid resumes par (epoch 2), whose held turn
# keeps its run open while the test sends leaf a message through par (as `dsh send` does): leaf's
# home is one only par's first run heard of. Leaf's second turn waits until par's step 2 has taken
# its input, so leaf's notice is steered into par's step 3 (P4) whatever par's step 1 (list_agents,
# which asks the workflows with homes) takes.
NESTED = {
    "name": "later-epoch-child",
    "fences": [{"hold": {"agent": "par", "turn": 3, "step": 2,
                         "until": {"inboxAccepted": {"agent": "par", "kind": "subagent-settled", "count": 2}}}},
               {"hold": {"agent": "leaf", "turn": 2, "step": 1,
                         "until": {"stepReached": {"agent": "par", "turn": 3, "step": 2}}}}],
    "agents": {
        "root": {"replies": [{"toolCalls": [{"id": "m", "name": "subagent", "arguments": {"label": "mid", "prompt": "Go mid."}}]},
                             {"text": "STARTED"}, {"text": "DONE"}]},
        "mid": {"spawnedBy": "m", "replies": [
            {"toolCalls": [{"id": "p", "name": "subagent", "arguments": {"label": "par", "prompt": "Go par."}}]},
            {"text": "M1"},
            {"toolCalls": [{"id": "again", "name": "send_message",
                            "arguments": {"agent_id": "{{child:p}}", "message": "Again."}}]},
            {"text": "M2"}, {"text": "M3"}]},
        "par": {"spawnedBy": "p", "replies": [
            {"toolCalls": [{"id": "l", "name": "subagent", "arguments": {"label": "leaf", "prompt": "Go leaf."}}]},
            {"text": "P1"}, {"text": "P2"},
            {"toolCalls": [{"id": "look", "name": "list_agents", "arguments": {}}]},
            {"text": "P3"}, {"text": "P4"}]},
        "leaf": {"spawnedBy": "l", "replies": [{"text": "L1"}, {"text": "L2"}]},
    },
}


def epochs_in(home: Path, session_id: str) -> list[int]:
    lines = [json.loads(line) for line in (home / "sessions" / session_id / "session.jsonl").read_text().splitlines()]
    return [e["data"]["epoch"] for e in lines if e.get("type") == "subagent/epoch"]


async def epoch_running(client: Client, workflow_id: str, epoch: int) -> None:
    """The workflow's latest run is epoch `epoch` (a state of the server's, read until it holds)."""
    while True:
        try:
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            started = history.events[0].workflow_execution_started_event_attributes
            if json.loads(started.input.payloads[0].data).get("epoch") == epoch:
                return
        except Exception:  # noqa: BLE001  (not started yet)
            pass
        await asyncio.sleep(0.1)  # polling a server state, not an ordering: the run exists or not


def homes_ab(tmp_path: Path) -> tuple[Path, Path, str, str, str]:
    """Two homes, `a` and `b`, a task queue of the test's own, and each home's queue."""
    a, b = tmp_path / "a", tmp_path / "b"
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    return a, b, queue, home_queue(queue, home_id(a)), home_queue(queue, home_id(b))


def placed_on_b(monkeypatch: pytest.MonkeyPatch, on_a: str, on_b: str, ids: dict[str, str],
                heard: dict[str, asyncio.Event]) -> None:
    """The homes' spread made certain: the log of the session the `l` call spawns (leaf) on b,
    every other on a (the claim writes nothing, so any worker may name either queue). `ids` maps
    each spawn call id ("None": the root) to its session; `heard[call]` is set once it is claimed."""

    class Placed(TurnActivities):
        def claim(self, agent: TreeInput) -> str | None:
            call = str((agent.descriptor or {}).get("spawnCallId"))
            ids[call] = agent.session_id
            if call in heard:
                heard[call].set()
            return on_b if call == "l" else on_a

    monkeypatch.setattr(worker_module, "TurnActivities", Placed)


async def test_a_later_epoch_parent_cold_resumes_a_child_of_its_first_epoch_on_a_home_only_that_epoch_knew(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, queue, on_a, on_b = homes_ab(tmp_path)
    ids: dict[str, str] = {}
    leaf_known = asyncio.Event()
    placed_on_b(monkeypatch, on_a, on_b, ids, {"l": leaf_known})
    plan = plan_flow(write_transcript(tmp_path, NESTED))
    records: list[dict[str, Any]] = []
    async with make_worker(await own_client(client), queue, home=a), make_worker(await own_client(client), queue, home=b):
        task = asyncio.ensure_future(run_tree_temporal(request_for(plan, tmp_path / "client", records), queue, client))
        await asyncio.wait_for(leaf_known.wait(), BACKSTOP)
        root = ids["None"]
        par = agent_workflow_id(root, ids["p"])
        await asyncio.wait_for(epoch_running(client, par, 2), BACKSTOP)
        answer = await user_call(client, root, "subagent.prompt",
                                 {"parentSessionId": ids["p"], "childSessionId": ids["l"], "message": "Say L2."})
        assert answer is not None and "messageId" in answer  # not NOT_RESUMABLE
        result = await asyncio.wait_for(task, BACKSTOP)
    assert result.violations == []
    assert sessions_in(b) == {ids["l"]}
    assert sessions_in(a) == {root, ids["m"], ids["p"]}
    assert epochs_in(a, ids["p"]) == [1, 2]
    assert epochs_in(b, ids["l"]) == [1, 2]  # leaf's second epoch in its one log, on b
    leaf = agent_workflow_id(root, ids["l"])
    [second] = await run_ids(client, par, leaf)  # par's epoch 2 started leaf's
    assert await queues_of(client, leaf, second) == [("dsh.turn", on_b)]
    # par's epoch 2 found leaf's log on b, having been told b by mid (from par's epoch 1 result).
    assert ("dsh.resume_check", on_b) in await queues_of(client, par)


async def test_workers_without_a_home_run_each_sessions_create_activity_once_over_its_runs_and_epochs(
    client: Client, tmp_path: Path
) -> None:
    script = tmp_path / "cold-resume.yaml"
    script.write_text(COLD_RESUME)
    plan = continued_as_new(plan_flow(script))  # every run of the child continues as new after a turn
    # (No fence orders the root's turns against the notices, and each run continues as new: how
    # the notices split the root's turns is a race on this engine, so the facts are not compared.)
    run = await asyncio.wait_for(run_temporal(client, plan, tmp_path / "temporal"), BACKSTOP)
    assert run.result.violations == [] and run.result.output == "DONE"
    root_id = run.result.root_session_id
    [child] = [s["sessionId"] for s in run.result.subagents]
    workflow_id = agent_workflow_id(root_id, child)
    epochs = await run_ids(client, root_id, workflow_id)
    assert len(epochs) >= 2  # cold-resumed at least once
    scheduled = [await queues_of(client, workflow_id, run_id) for run_id in epochs]
    # Epoch 1 claims (no home queue answered); its continued runs and later epochs claim no more.
    creates = [[kind for kind, _ in runs].count("dsh.create_session") for runs in scheduled]
    assert creates == [1] + [0] * (len(epochs) - 1), scheduled
    assert [kind for kind, _ in scheduled[0]][0] == "dsh.create_session"
    root = [kind for kind, _ in await queues_of(client, root_id)]
    assert root.count("dsh.create_session") == 1, root


# -- list_agents of descendants across homes ---------------------------------------------------------

DEEP = {
    "name": "deep-list",
    "fences": [{"hold": {"agent": "root", "turn": 1, "step": 2, "until": {"settled": {"agent": "mid"}}}}],
    "agents": {
        "root": {"replies": [{"toolCalls": [{"id": "m", "name": "subagent", "arguments": {"label": "mid", "prompt": "Go mid."}}]},
                             {"toolCalls": [{"id": "ls", "name": "list_agents", "arguments": {"scope": "descendants"}}]},
                             {"text": "LISTED"}]},
        "mid": {"spawnedBy": "m", "replies": [
            {"toolCalls": [{"id": "l", "name": "subagent", "arguments": {"label": "leaf", "prompt": "Go leaf."}}]},
            {"text": "M1"}, {"text": "M2"}]},
        "leaf": {"spawnedBy": "l", "replies": [{"text": "L1"}]},
    },
}


def listed(home: Path, session: str, call: str = "ls") -> list[dict[str, Any]]:
    """A session's `list_agents` answer (the value of its tool result for `call`)."""
    events = [json.loads(line) for line in (home / "sessions" / session / "session.jsonl").read_text().splitlines()[1:]]
    [value] = [e["data"]["value"] for e in events if e["type"] == "tool/result" and e["data"]["callId"] == call]
    return value


def shape(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r.get("label"), r.get("depth"), r.get("status")) for r in rows]


def labelled(home: Path, label: str | None) -> str:
    """The session of that label in `home` (None: the root)."""
    for log in (home / "sessions").glob("*/session.jsonl"):
        lines = [json.loads(line) for line in log.read_text().splitlines()]
        found = next((e["data"].get("label") for e in lines[1:] if e["type"] == "subagent/descriptor"), None)
        if found == label:
            return log.parent.name
    raise AssertionError(f"no session labelled {label} in {home}")


async def leaf_on_b(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: dict[str, Any]) -> RunResult:
    """`spec` on the local engine (home `local`) and on two homes, `a` and `b`, where only the
    session its `l` call spawns (leaf) is placed on b."""
    a, b, queue, on_a, on_b = homes_ab(tmp_path)
    placed_on_b(monkeypatch, on_a, on_b, {}, {})
    plan = plan_flow(write_transcript(tmp_path, spec))
    await arun_flow(plan, home=tmp_path / "local")
    records: list[dict[str, Any]] = []
    async with make_worker(await own_client(client), queue, home=a), make_worker(await own_client(client), queue, home=b):
        result = await asyncio.wait_for(
            run_tree_temporal(request_for(plan, tmp_path / "client", records), queue, client), BACKSTOP)
    assert result.violations == []
    assert sessions_in(b) == {labelled(b, "leaf")}  # leaf alone on b
    return result


async def test_list_agents_of_descendants_lists_a_grandchild_whose_log_is_on_another_home(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """root and mid on home a, leaf (mid's child) on b: the root's turn, on a, lists leaf from the
    workflows (mid's `children` query), as the local engine lists it from its log."""
    root = (await leaf_on_b(client, tmp_path, monkeypatch, DEEP)).root_session_id
    a, local_home = tmp_path / "a", tmp_path / "local"
    assert root in sessions_in(a)
    assert shape(listed(a, root)) == shape(listed(local_home, labelled(local_home, None))) == \
        [("mid", 1, "ready"), ("leaf", 2, "ready")]


# root -> mid -> leaf. mid's first epoch starts leaf (its log on b) and settles; the root wakes mid
# (its second epoch, a new run that never started leaf), which lists its children; once mid settled
# again the root lists its descendants. Both lists name leaf, as on the local engine.
EPOCHS = {
    "name": "earlier-epoch-list",
    "fences": [{"hold": {"agent": "root", "turn": 1, "step": 2, "until": {"settled": {"agent": "mid"}}}},
               {"hold": {"agent": "root", "turn": 1, "step": 3,
                         "until": {"inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": 2}}}},
               {"hold": {"agent": "leaf", "turn": 1, "step": 1, "until": {"turnEnded": {"agent": "mid", "turn": 1}}}}],
    "agents": {
        "root": {"replies": [{"toolCalls": [{"id": "m", "name": "subagent", "arguments": {"label": "mid", "prompt": "Go mid."}}]},
                             {"toolCalls": [{"id": "again", "name": "send_message",
                                             "arguments": {"agent_id": "{{child:m}}", "message": "Again."}}]},
                             {"toolCalls": [{"id": "ls", "name": "list_agents", "arguments": {"scope": "descendants"}}]},
                             {"text": "LISTED"}]},
        "mid": {"spawnedBy": "m", "replies": [
            {"toolCalls": [{"id": "l", "name": "subagent", "arguments": {"label": "leaf", "prompt": "Go leaf."}}]},
            {"text": "M1"}, {"text": "M2"},
            {"toolCalls": [{"id": "look", "name": "list_agents", "arguments": {}}]},
            {"text": "M3"}]},
        "leaf": {"spawnedBy": "l", "replies": [{"text": "L1"}]},
    },
}


async def test_list_agents_lists_the_children_of_earlier_epochs_whose_logs_are_on_another_home(
    client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """root and mid on home a, leaf (started by mid's first epoch) on b. mid's second epoch is a new
    run that never started leaf: its `list_agents` and the root's of descendants still list leaf,
    read from the earlier epoch's run (the workflow id's closed runs), as the local engine lists it."""
    result = await leaf_on_b(client, tmp_path, monkeypatch, EPOCHS)
    a, local_home = tmp_path / "a", tmp_path / "local"
    root, mid = result.root_session_id, labelled(a, "mid")
    assert result.output == "LISTED" and sessions_in(a) == {root, mid}
    assert epochs_in(a, mid) == [1, 2]
    assert shape(listed(a, mid, "look")) == shape(listed(local_home, labelled(local_home, "mid"), "look")) == \
        [("leaf", None, "ready")]
    assert shape(listed(a, root)) == shape(listed(local_home, labelled(local_home, None))) == \
        [("mid", 1, "ready"), ("leaf", 2, "ready")]
