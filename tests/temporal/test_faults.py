"""Faults on the Temporal engine (issue 12 item 5): a worker SIGKILLed mid-turn, the dev server
restarted on its SQLite file mid-run. Either way the tree completes, every notice arrives exactly
once and no accepted message is lost — read from the JSONL logs, which are the projection.

Ordering without sleeps: the child's first step is held by a fence until its inbox accepted a
second message. Only a retried turn sends one (the continuation of the turn the fault cut off,
turn.py), so the turn is held until the fault lands; the test learns that it is held from the
tree's fence board (the root workflow's `fence_facts_after` long-poll). Heartbeat timeouts are
two seconds here (`temporal.heartbeatTimeoutSeconds`), so a dead worker's turn moves in seconds.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from temporal_kit import dev_server, temporal_binary
from temporalio.client import Client

from dsh.loader.agent import user_message
from dsh.loader.config import TemporalConfig
from dsh.loader.engines.client import connect, run_tree_temporal
from dsh.loader.engines.wire import Delivery, child_workflow_id
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult
from dsh.loader.ndjson import RecordStream
from dsh.loader.session import SessionStore
from dsh.loader.sinks import RunSinks
from dsh.loader.subagents import continuation_message
from dsh.loader.testing.runner import plan_flow

# `dsh worker` as a test SIGKILLs it: its workflow tasks leave its sticky queue after 1 s, not 10 s.
KILLABLE = [sys.executable, str(Path(__file__).with_name("killable_worker.py"))]
HEARTBEAT = 2.0
BACKSTOP = 120  # a loud failure, never an ordering

KILLED = """\
version: 1
name: worker-killed-mid-turn
task: Start a worker that reports twice, then note its settlement.
overlays: [quiet-reports]
fences:
  - hold: {agent: w, step: 2, until: {all: [{inboxAccepted: {agent: w, count: 2}}, {turnEnded: {agent: root, turn: 1}}]}}
agents:
  root:
    replies:
      - toolCalls: [{id: start-w, name: subagent, arguments: {label: worker, prompt: Report twice.}}]
      - text: STARTED
      - text: ALL_NOTED
  w:
    spawnedBy: start-w
    replies:
      - toolCalls: [{id: w-first, name: report, arguments: {output: FIRST}}]
      - toolCalls: [{id: w-second, name: report, arguments: {output: SECOND}}]
      - text: W_DONE
"""
# The fault lands in w's turn 1, held before step 2, after its first report went out. The retry
# continues that cut-off turn as turn 2 (the continuation is the second accepted message), whose
# step 2 the same fence lets through: the fence engages in the turn that returns. The fence names
# root's turn 1 as well (ended long before) so that both agents' facts go on the board, which
# carries only the facts of agents a fence names: `until_held` reads them there.


class Run:
    """One tree on the Temporal engine from this process, its records collected as they stream."""

    def __init__(self, tmp_path: Path, queue: str) -> None:
        script = tmp_path / "killed.yaml"
        script.write_text(KILLED)
        plan = plan_flow(script)
        temporal = plan.config.temporal.model_copy(update={"task_queue": queue, "heartbeat_timeout_seconds": HEARTBEAT})
        testing = plan.config.testing.model_copy(update={"fence_timeout_seconds": float(BACKSTOP)})
        config = plan.config.model_copy(update={"temporal": temporal, "testing": testing})
        self.home = tmp_path / "home"
        self.records: list[dict[str, Any]] = []
        self.child_started = asyncio.Event()
        self.root_id = ""
        sinks = RunSinks(records=RecordStream(self._record))
        sinks.on_started = self._started
        self.request = RunRequest(home=self.home, config=config, transcript=plan.script, fences_allowed=True,
                                  sinks=sinks)
        self.temporal: TemporalConfig = temporal

    def _started(self, root_id: str) -> None:
        self.root_id = root_id

    def _record(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        if rec["type"] == "lifecycle" and rec["name"] == "subagent/start":
            self.child_started.set()  # the root workflow exists and has started the child's

    async def start(self, client: Client) -> asyncio.Task[RunResult]:
        return asyncio.create_task(run_tree_temporal(self.request, self.temporal, client=client))

    async def until_held(self, client: Client) -> None:
        """The child's first step is held and the root's first turn has ended (the board says so)."""
        await asyncio.wait_for(self.child_started.wait(), BACKSTOP)
        board = client.get_workflow_handle(self.root_id)
        facts: list[list[Any]] = []
        wanted = [["step", "w", 1, 2], ["turnEnded", "root", 1]]
        while not all(f in facts for f in wanted):
            facts += await asyncio.wait_for(board.execute_update("fence_facts_after", len(facts),
                                                                 result_type=list), BACKSTOP)

    def assert_exactly_once(self, result: RunResult, child_sources: list[dict[str, Any]], turns: list[int]) -> None:
        """Completed without violations; the root accepted the task, both reports and the one
        notice, each once; the child accepted `child_sources` (by source), each once, in `turns`."""
        assert (result.stop_reason, result.output, result.violations, result.exit_code) == (
            "completed", "ALL_NOTED", [], 0)
        store = SessionStore(self.home)
        [child] = [s["sessionId"] for s in result.subagents]
        root_in = inserted(store, self.root_id)
        kinds = [m["source"]["kind"] for m in root_in]
        assert kinds == ["user", "subagent-report", "subagent-report", "subagent-settled"]  # each once
        assert [m["content"][-1]["text"] for m in root_in[1:3]] == ["FIRST", "SECOND"]
        assert all(m["source"].get("senderSessionId") == child for m in root_in[1:])
        assert [m["source"] for m in inserted(store, child)] == child_sources
        events = store.read(child).events
        assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == turns
        ends = [e["data"]["reason"]["kind"] for e in events if e["type"] == "turn/end"]
        assert ends[-1] == "completed" and set(ends[:-1]) <= {"interrupted"}  # only a cut-off turn before
        ends_streamed = [r for r in self.records if r["type"] == "lifecycle" and r["name"] == "subagent/end"]
        assert [(r["sessionId"], r["stopReason"]) for r in ends_streamed] == [(child, "completed")]


def inserted(store: SessionStore, session_id: str) -> list[dict[str, Any]]:
    """Every message the session's inbox accepted, in order."""
    return [m for e in store.read(session_id).events if e["type"] == "agent/inbox/spliced"
            for m in e["data"].get("inserted") or []]


@contextmanager
def dsh_worker(address: str, queue: str, cwd: Path, **extra_env: str) -> Iterator[subprocess.Popen[bytes]]:
    """`dsh worker` in its own process group, killable (killable_worker.py); `extra_env` adds to its
    environment (e.g. a key)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env.update(DSH_TEMPORAL__ADDRESS=address, DSH_TEMPORAL__TASK_QUEUE=queue, **extra_env)
    with open(cwd / f"worker-{uuid.uuid4().hex[:6]}.log", "wb") as log:  # a file: a full pipe would stop it
        proc = subprocess.Popen([*KILLABLE, "worker"], env=env, cwd=cwd, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


async def test_a_worker_sigkilled_mid_turn_loses_nothing_and_a_new_worker_completes_the_tree(tmp_path: Path) -> None:
    async with dev_server() as client:
        address = client.service_client.config.target_host
        queue = f"fault-kill-{uuid.uuid4().hex[:8]}"
        run = Run(tmp_path, queue)
        with dsh_worker(address, queue, tmp_path) as first:
            task = await run.start(client)
            await run.until_held(client)
            os.killpg(first.pid, signal.SIGKILL)  # the worker and nothing else: its own session
            assert await asyncio.to_thread(first.wait) == -signal.SIGKILL
        assert not task.done()
        with dsh_worker(address, queue, tmp_path) as second:
            result = await asyncio.wait_for(task, BACKSTOP)
            second.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(second.wait, 60) == 0
    # The prompt once, then the retry's continuation of the turn the kill cut off (turn.py).
    run.assert_exactly_once(result, [{"kind": "user"}, continuation_message()["source"]], [1, 2])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def sqlite_server(db: Path, port: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [temporal_binary(), "server", "start-dev", "--headless", "--db-filename", str(db), "--ip", "127.0.0.1",
         "--port", str(port), "--log-level", "error"],
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


async def serving(server: subprocess.Popen[str], address: str) -> Client:
    """The client of a started server, once its banner says it serves (read, not waited for)."""
    def banner() -> None:
        assert server.stdout is not None
        for line in server.stdout:
            if line.startswith("Temporal Server:"):
                threading.Thread(target=server.stdout.read, daemon=True).start()  # a full pipe would stop it
                return
        raise AssertionError("the dev server exited before it served")

    await asyncio.wait_for(asyncio.to_thread(banner), BACKSTOP)
    return await connect(address, "default")


async def test_a_dev_server_restarted_on_its_sqlite_file_mid_run_loses_nothing(tmp_path: Path) -> None:
    """The server is SIGKILLed while the child's turn is held and started again on the same SQLite
    file and port; the worker (in this process) and the turn live on. The held step is released
    by a message sent after the restart (a steer, through the child workflow's `deliver` signal),
    so the tree finishes only if the server kept its state and the turn's long-poll reconnected.
    The heartbeat timeout is a minute here, far beyond the sub-second outage: the turn is not
    retried, so the child runs one turn (a retry would show as turn 2 and fail the counts)."""
    port = free_port()
    address, db = f"127.0.0.1:{port}", tmp_path / "temporal.db"
    server = sqlite_server(db, port)
    try:
        client = await serving(server, address)
        queue = f"fault-restart-{uuid.uuid4().hex[:8]}"
        run = Run(tmp_path, queue)
        run.temporal = run.temporal.model_copy(update={"heartbeat_timeout_seconds": 60.0})
        async with make_worker(client, queue):
            task = await run.start(client)
            await run.until_held(client)
            os.killpg(server.pid, signal.SIGKILL)
            await asyncio.to_thread(server.wait)
            server = sqlite_server(db, port)
            again = await serving(server, address)
            child = next(r["sessionId"] for r in run.records if r["type"] == "lifecycle")
            steer = Delivery(dict(user_message("GO_ON", {"kind": "user"})), send="steer")
            await again.get_workflow_handle(child_workflow_id(run.root_id, child)).signal("deliver", steer)
            result = await asyncio.wait_for(task, BACKSTOP)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    run.assert_exactly_once(result, [{"kind": "user"}, {"kind": "user"}], [1])
    texts = [m["content"][0]["text"] for m in inserted(SessionStore(run.home), child)]
    assert texts == ["Report twice.", "GO_ON"]
