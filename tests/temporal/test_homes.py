"""Workers without a shared home (issue 12 "Not yet" item 4; loader/engines/README.md "Homes").

Two workers in this process, each with its own home (its own home queue beside the shared one),
and a client whose `--home` is a third, empty one:
- a shipped multi-child transcript and a generated fan-out complete with the local engine's
  settlement facts and stream (`temporal_kit.comparable`), read by the client over the server from
  both homes; every session's log is whole in exactly one home, the client's home stays empty, and
  the fan-out's sessions are split over both homes (each holds some, none holds all);
- a cold resume (`send_message` to a settled child) runs the child's next epoch on its home;
- each session's activities after its create activity run on its home's queue (the histories
  say which queue each activity was scheduled on), so a log is never opened on another home.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, client, comparable, records_of, settlement_facts, write_transcript  # noqa: F401  (client: the module's dev-server fixture)
from temporal_kit import dev_server
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.worker import Replayer
from test_faults import KILLABLE, Run
from test_temporal_engine import COLD_RESUME

from dsh.loader.config import TemporalConfig
from dsh.loader.engines.homes import home_id, home_queue
from dsh.loader.engines.wire import agent_workflow_id
from dsh.loader.engines.worker import make_worker
from dsh.loader.engines.workflow import AgentWorkflow
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.ndjson import RecordStream
from dsh.loader.sinks import RunSinks
from dsh.loader.subagents import continuation_message
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKSTOP = 120.0
FANOUT = 20
HISTORIES = Path(__file__).parent / "histories"


def fanout(n: int) -> dict[str, Any]:
    """benchmarks/fanout.py's transcript: N children in one reply, the root held until N notices."""
    calls = [{"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}_DONE."}}
             for i in range(1, n + 1)]
    agents: dict[str, Any] = {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "ALL_RECEIVED"}]}}
    for i in range(1, n + 1):
        agents[f"w{i}"] = {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]}
    fence = {"hold": {"agent": "root", "turn": 1, "step": 2,
                      "until": {"inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": n}}}}
    return {"name": f"fanout-{n}", "task": "fan out", "fences": [fence], "agents": agents}


@asynccontextmanager
async def two_homes(client: Client, queue: str, homes: list[Path]) -> AsyncIterator[None]:
    """A worker per home, each on its own client (the SDK allows one worker per task queue and
    client: two processes, as two machines would run them)."""
    async with AsyncExitStack() as stack:
        for home in homes:
            own = await Client.connect(client.service_client.config.target_host, namespace=client.namespace)
            await stack.enter_async_context(make_worker(own, queue, home=home))
        yield


class OnHomes:
    def __init__(self, records: list[dict[str, Any]], result: RunResult, homes: list[Path], queue: str) -> None:
        self.records, self.result, self.homes, self.queue = records, result, homes, queue


async def run_on_homes(client: Client, plan: FlowPlan, tmp_path: Path) -> OnHomes:
    """The tree run by two workers on homes `a` and `b`, from a client whose home is `client`."""
    homes = [tmp_path / "a", tmp_path / "b"]
    records: list[dict[str, Any]] = []
    sinks = RunSinks(records=RecordStream(records.append))
    request = RunRequest(home=tmp_path / "client", config=backstopped(plan.config), transcript=plan.script,
                         fences_allowed=True, sinks=sinks)
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    async with two_homes(client, queue, homes):
        result = await asyncio.wait_for(run_tree_temporal(request, queue, client), BACKSTOP)
    assert sinks.records is not None
    sinks.records.result(result.to_json())
    return OnHomes(records, result, homes, queue)


async def run_tree_temporal(request: RunRequest, queue: str, client: Client) -> RunResult:
    from dsh.loader.engines.client import run_tree_temporal as run

    return await run(request, TemporalConfig(task_queue=queue), client=client)


def sessions_in(home: Path) -> set[str]:
    return {p.parent.name for p in (home / "sessions").glob("*/session.jsonl")}


def tree_sessions(records: list[dict[str, Any]]) -> set[str]:
    return {r["sessionId"] for r in records if r["type"] == "event"}


def merged(homes: list[Path], into: Path) -> Path:
    """One home holding every home's logs (each is in exactly one), for the flow projection."""
    for home in homes:
        for log in (home / "sessions").glob("*/session.jsonl"):
            target = into / "sessions" / log.parent.name / "session.jsonl"
            target.parent.mkdir(parents=True)
            shutil.copyfile(log, target)
    return into


def assert_split(records: list[dict[str, Any]], homes: list[Path], client_home: Path) -> list[set[str]]:
    """Every session's log is in exactly one home, the homes hold only the tree, the client's none."""
    found = [sessions_in(h) for h in homes]
    assert found[0].isdisjoint(found[1])
    assert found[0] | found[1] == tree_sessions(records)
    assert sessions_in(client_home) == set()
    return found


async def run_ids(client: Client, root_id: str, workflow_id: str) -> list[str]:
    """The runs of a child's workflow the root started (its epochs), in order, from the root's
    histories (continued as new or not)."""
    found = [e.child_workflow_execution_started_event_attributes.workflow_execution
             for e in await all_events(client, root_id)
             if e.HasField("child_workflow_execution_started_event_attributes")]
    return [w.run_id for w in found if w.workflow_id == workflow_id]


async def all_events(client: Client, workflow_id: str, run_id: str | None = None) -> list[Any]:
    """Every event of one execution's chain of runs (continue-as-new), from `run_id` (default: the
    latest run's first one)."""
    if run_id is None:
        latest = await client.get_workflow_handle(workflow_id).fetch_history()
        run_id = latest.events[0].workflow_execution_started_event_attributes.first_execution_run_id
    out: list[Any] = []
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        run_id = ""
        for e in history.events:
            out.append(e)
            if e.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return out


async def queues_of(client: Client, workflow_id: str, run_id: str | None = None) -> list[tuple[str, str]]:
    """(activity type, task queue) of each activity the runs scheduled, in order, a turn's in its
    own workflow (`dsh.turn_run`) counted where that workflow started."""
    out: list[tuple[str, str]] = []
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    run_id = run_id or history.events[0].workflow_execution_started_event_attributes.first_execution_run_id
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        run_id = ""
        for e in history.events:
            if e.HasField("activity_task_scheduled_event_attributes"):
                a = e.activity_task_scheduled_event_attributes
                out.append((a.activity_type.name, a.task_queue.name))
            if e.HasField("start_child_workflow_execution_initiated_event_attributes"):
                child = e.start_child_workflow_execution_initiated_event_attributes
                if child.workflow_type.name == "dsh.turn_run":
                    out += await queues_of(client, child.workflow_id)
            if e.HasField("workflow_execution_continued_as_new_event_attributes"):
                run_id = e.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return out


async def assert_pinned(client: Client, root_id: str, session_id: str, queue: str, homes: list[Path]) -> None:
    """The session's create activity ran on the shared queue, every later activity on the queue
    of the home that holds its log."""
    [home] = [h for h in homes if session_id in sessions_in(h)]
    mine = home_queue(queue, home_id(home))
    scheduled = await queues_of(client, agent_workflow_id(root_id, session_id))
    assert scheduled[0] == ("dsh.create_session", queue)
    assert scheduled[1:] and all(q == mine for _, q in scheduled[1:]), scheduled


async def test_a_shipped_multi_child_tree_on_two_homes_gives_the_local_facts_and_stream(
    client: Client, tmp_path: Path
) -> None:
    plan = plan_flow("four-children-one-step")
    local_records = await records_of(plan, tmp_path / "local-records")
    local = await arun_flow(plan, home=tmp_path / "local")
    run = await run_on_homes(client, plan, tmp_path)
    assert comparable(run.records) == comparable(local_records)
    found = assert_split(run.records, run.homes, tmp_path / "client")
    result = run.result
    home = merged(run.homes, tmp_path / "merged")
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, plan.script.spec.name)))
    assert settlement_facts(flow) == settlement_facts(local)
    for sid in found[0] | found[1]:
        await assert_pinned(client, result.root_session_id, sid, run.queue, run.homes)


async def test_a_fan_out_spreads_over_both_homes_and_streams_from_both(client: Client, tmp_path: Path) -> None:
    plan = plan_flow(write_transcript(tmp_path, fanout(FANOUT)))
    local_records = await records_of(plan, tmp_path / "local-records")
    local = await arun_flow(plan, home=tmp_path / "local")
    run = await run_on_homes(client, plan, tmp_path)
    # The notices reach the root in the order the children settle, on either engine a race of
    # twenty (no fence orders them): the root is compared by what it received, every child whole.
    assert but_the_root(comparable(run.records)) == but_the_root(comparable(local_records))
    found = assert_split(run.records, run.homes, tmp_path / "client")
    assert found[0] and found[1]  # each home holds some, none holds all (1 + 20 sessions at random)
    result = run.result
    home = merged(run.homes, tmp_path / "merged")
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, plan.script.spec.name)))
    assert by_content(settlement_facts(flow)) == by_content(settlement_facts(local))


def unordered(value: Any) -> Any:
    """Lists as sorted multisets, recursively (JSON text as the sort key), dicts with str keys."""
    if isinstance(value, dict):
        return {str(k): unordered(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return sorted((unordered(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    return value


def by_content(facts: dict[str, Any]) -> Any:
    """Settlement facts with the notices as a multiset (their message ids name their arrival order)."""
    return unordered({**facts, "notice_texts": list(facts["notice_texts"].values())})


def but_the_root(seen: dict[str, Any]) -> dict[str, Any]:
    """`comparable` without the root's own events (the order its twenty notices were spliced in,
    in how many splices, is the race of their settlements on either engine), with the notices the
    root received (sender and texts) instead."""
    agents = dict(seen["agents"])
    root = agents.pop("root")
    received = sorted(json.dumps(m, sort_keys=True) for e in root if e["type"] == "agent/inbox/spliced"
                      for m in e["data"].get("inserted") or [] if m["source"]["kind"] == "subagent-settled")
    return {**seen, "agents": agents, "root received": received}


async def test_a_cold_resume_runs_the_childs_next_epoch_on_its_home(client: Client, tmp_path: Path) -> None:
    script = tmp_path / "cold-resume.yaml"
    script.write_text(COLD_RESUME)
    plan = plan_flow(script)
    local = await arun_flow(plan, home=tmp_path / "local")
    run = await run_on_homes(client, plan, tmp_path)
    found = assert_split(run.records, run.homes, tmp_path / "client")
    result, homes = run.result, run.homes
    home = merged(homes, tmp_path / "merged")
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, plan.script.spec.name)))
    assert settlement_facts(flow) == settlement_facts(local)
    [child] = [s["sessionId"] for s in result.subagents]
    [home_of_child] = [h for h, sessions in zip(homes, found, strict=True) if child in sessions]
    epochs = [json.loads(line)["data"]["epoch"] for line in
              (home_of_child / "sessions" / child / "session.jsonl").read_text().splitlines()
              if json.loads(line).get("type") == "subagent/epoch"]
    assert epochs == [1, 2, 3]  # every epoch in the one log on its home
    mine = home_queue(run.queue, home_id(home_of_child))
    workflow_id = agent_workflow_id(result.root_session_id, child)
    first, *later = await run_ids(client, result.root_session_id, workflow_id)
    # Epoch 1: the create activity on the shared queue, then its turn on its home; epochs 2 and 3
    # (new runs under the same id, started pinned by the root): a turn on its home, no create.
    assert await queues_of(client, workflow_id, first) == [("dsh.create_session", run.queue), ("dsh.turn", mine)]
    assert len(later) == 2
    for run_id in later:
        assert await queues_of(client, workflow_id, run_id) == [("dsh.turn", mine)]
    # The root's resume check read the child's log: on the child's home too.
    root = await queues_of(client, result.root_session_id)
    assert ("dsh.resume_check", mine) in root
    # Pinned runs replay: the root and the child's three epochs are test_replay.py's
    # `homes-cold-resume.*` (`DSH_RECORD_HISTORIES=1 pytest -n 0 -k cold_resume tests/temporal/test_homes.py`).
    runs = [(result.root_session_id, None), *((workflow_id, r) for r in [first, *later])]
    for n, (wid, run_id) in enumerate(runs):
        history = await client.get_workflow_handle(wid, run_id=run_id).fetch_history()
        assert (await Replayer(workflows=[AgentWorkflow]).replay_workflow(history)).replay_failure is None
        if os.environ.get("DSH_RECORD_HISTORIES"):
            (HISTORIES / f"homes-cold-resume.{n}.json").write_text(
                json.dumps({"workflowId": wid, "history": history.to_json_dict()}, indent=1) + "\n")


# -- a home whose workers are all gone ---------------------------------------------------------------

def home_worker(address: str, queue: str, home: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """`dsh worker --home HOME` in its own process group (a machine of its own)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env.update(DSH_TEMPORAL__ADDRESS=address, DSH_TEMPORAL__TASK_QUEUE=queue)
    with open(cwd / f"worker-{uuid.uuid4().hex[:6]}.log", "wb") as log:  # a file: a full pipe would stop it
        return subprocess.Popen([*KILLABLE, "worker", "--home", str(home)], env=env, cwd=cwd, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=log)


async def retried_and_waiting(client: Client, workflow_id: str) -> Any:
    """The workflow's turn activity, its worker dead, rescheduled (attempt 2) and not started: a
    state of the server's, read until it holds (a wait for it, not an ordering)."""
    handle = client.get_workflow_handle(workflow_id)
    while True:
        pending = (await handle.describe()).raw_description.pending_activities
        turn = [p for p in pending if p.activity_type.name == "dsh.turn"]
        if turn and turn[0].attempt >= 2:
            return turn[0]
        await asyncio.sleep(0.1)  # polling a server state; the heartbeat timeout moves it (2 s)


async def test_a_home_whose_worker_died_waits_for_a_worker_of_that_home_and_its_sessions_resume(
    tmp_path: Path
) -> None:
    """The tree (root and child) is on home `b`, served by one `dsh worker --home b`, SIGKILLed while
    the child's turn is held (test_faults' scenario). A worker on another home (`a`) serves the
    shared queue meanwhile: the child's retried turn is pinned to b's queue, so it waits there
    (scheduled, not started) and a never sees the tree; a new worker on b takes it and the tree
    completes as after any worker's death, every message once, every log whole on b."""
    async with dev_server() as client:
        address = client.service_client.config.target_host
        queue = f"home-kill-{uuid.uuid4().hex[:8]}"
        run = Run(tmp_path, queue)  # its home: b's, the client reads it there
        elsewhere = tmp_path / "a"
        first = home_worker(address, queue, run.home, tmp_path)
        try:
            task = await run.start(client)
            await run.until_held(client)
            os.killpg(first.pid, signal.SIGKILL)
            assert await asyncio.to_thread(first.wait) == -signal.SIGKILL
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
        [child] = [p.parent.name for p in (run.home / "sessions").glob("*/session.jsonl") if p.parent.name != run.root_id]
        async with make_worker(await Client.connect(address), queue, home=elsewhere):
            waiting = await asyncio.wait_for(retried_and_waiting(client, agent_workflow_id(run.root_id, child)), BACKSTOP)
            assert waiting.state == PendingActivityState.PENDING_ACTIVITY_STATE_SCHEDULED
            assert not task.done()
            second = home_worker(address, queue, run.home, tmp_path)
            try:
                result = await asyncio.wait_for(task, BACKSTOP)
            finally:
                second.send_signal(signal.SIGTERM)
                await asyncio.to_thread(second.wait, 60)
        assert sessions_in(elsewhere) == set()
        assert sessions_in(run.home) == {run.root_id, child}
    run.assert_exactly_once(result, [{"kind": "user"}, continuation_message()["source"]], [1, 2])
