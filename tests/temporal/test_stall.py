"""A stalled tree under `run.parked: wait` on both engines (issue 12, SPEC §17.2, §18.2): the root
stops its own worker while a follow-up is queued, so the worker parks and every agent is idle.
Each engine then says so once — T-CLI-STALLED as a warning, one `waiting` record whose entry's
command resumes the worker — and keeps waiting; `run.status` and `subagent.list` (the socket
locally, the Temporal client's queries otherwise) answer the same; the record's own `dsh send`
wakes the worker and the run ends the same way.

Ordering: the root's interrupt waits for the worker's hang (a fence); the test waits for the
`waiting` record (an event set by the sink), then sends. No sleep.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporal_kit import backstopped, dev_server
from temporalio.client import Client

from dsh.loader.config import TemporalConfig, compose, flag_layer
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.control import user_call
from dsh.loader.engines.stream import StreamMode
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, run_tree
from dsh.loader.host.client import call
from dsh.loader.ndjson import RecordStream
from dsh.loader.session import SessionStore
from dsh.loader.sinks import RunSinks
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript

from test_seam import env_without_dsh

DSH = [sys.executable, "-c", "from dsh.cli.main import entry; entry()"]
BACKSTOP = 60  # a loud failure, never an ordering

STALL = """\
version: 1
name: stall-wait
task: Start a worker, queue work for it, stop it.
fences:
  - hold: {agent: root, turn: 1, step: 3, until: {hangReached: {agent: worker}}}
agents:
  root:
    replies:
      - toolCalls: [{id: sa, name: subagent, arguments: {label: worker, prompt: Work.}}]
      - toolCalls: [{id: sb, name: send_message, arguments: {agent_id: "{{child:sa}}", message: B}}]
      - toolCalls: [{id: stop, name: interrupt_agent, arguments: {agent_id: "{{child:sa}}"}}]
      - text: WAITING
      - text: CHILD_DONE
  worker:
    spawnedBy: sa
    replies:
      - hang: {text: partial}
      - text: B_OK
      - text: MORE_OK
"""


class Observed:
    """What a caller of one run sees: its records, warnings, parked entries; the stall as an event."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self.waiting_entries: list[list[dict[str, Any]]] = []
        self.root = ""
        self.stalled = asyncio.Event()

    def sinks(self) -> RunSinks:
        return RunSinks(records=RecordStream(self._record), on_warning=self.warnings.append,
                        on_waiting=self.waiting_entries.append, on_started=self._started)

    def _started(self, root: str) -> None:
        self.root = root

    def _record(self, rec: dict[str, Any]) -> None:
        self.records.append(rec)
        if rec["type"] == "waiting":
            self.stalled.set()


async def dsh(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    import subprocess

    return await asyncio.to_thread(subprocess.run, [*DSH, *args], env=env, cwd=cwd, capture_output=True, text=True,
                                   timeout=120)


def named(value: Any, names: dict[str, str]) -> Any:
    text = json.dumps(value, sort_keys=True)
    for sid, name in names.items():
        text = text.replace(sid, name)
    return json.loads(text)


async def run_stalled(engine: str, tmp_path: Path, client: Client | None, stream: StreamMode = "auto") -> dict[str, Any]:
    """One run of STALL on `engine` under `--parked wait`, resumed by its `waiting` record's command;
    on Temporal, `stream` says where the client reads the logs (the stall's record included)."""
    home = tmp_path / (engine if stream == "auto" else f"{engine}-{stream}")
    path = tmp_path / "stall-wait.yaml"
    path.write_text(STALL)
    script = load_transcript(str(path))
    composed = compose(transcript=script, environ={}, cwd=tmp_path, flags=[flag_layer("--parked", "run.parked", "wait")])
    assert composed.config.run.parked == "wait"
    seen = Observed()
    config = backstopped(composed.config)
    env = env_without_dsh()
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    if client is not None:
        env.update(DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host, DSH_TEMPORAL__TASK_QUEUE=queue)
    request = RunRequest(home=home, config=config, transcript=script, fences_allowed=True, sinks=seen.sinks(),
                         serve_control=client is None)

    async def ask(method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        if client is None:
            return await call(home, seen.root, method, params)
        return await user_call(client, seen.root, method, params)

    async def drive(run: asyncio.Task[RunResult]) -> dict[str, Any]:
        await asyncio.wait_for(seen.stalled.wait(), BACKSTOP)
        assert not run.done()  # `wait`: the stalled run keeps waiting for a person
        status = await ask("run.status", {})
        listed = await ask("subagent.list", {"parentSessionId": seen.root})
        # `dsh sessions list` reads `run.status` too: the socket, or the configured Temporal engine.
        listing = await dsh(["sessions", "list", "--json", "--home", str(home)],
                            {**env, "DSH_ENGINE": "local" if client is None else "temporal"}, tmp_path)
        assert listing.returncode == 0, listing.stderr
        rows = {row["id"]: (row["live"], row["state"]) for row in map(json.loads, listing.stdout.splitlines())}
        [waiting] = [r for r in seen.records if r["type"] == "waiting"]
        command = [a if a != "MESSAGE" else "More." for a in shlex.split(waiting["parked"][0]["send"])]
        assert command[:2] == ["dsh", "send"]
        sent = await dsh(command[1:], env, tmp_path)
        assert sent.returncode == 0, sent.stderr
        result = await asyncio.wait_for(run, BACKSTOP)
        return {"status": status, "list": listed, "rows": rows, "waiting": waiting, "result": result, "sent": sent.stdout.strip()}

    if client is None:
        out = await drive(asyncio.create_task(run_tree(request)))
    else:
        async with make_worker(client, queue):
            out = await drive(asyncio.create_task(run_tree_temporal(request, TemporalConfig(task_queue=queue),
                                                                    client=client, stream=stream)))
    out.update(seen=seen, home=home, root=seen.root)
    return out


@pytest.fixture
async def both(tmp_path: Path) -> dict[str, dict[str, Any]]:
    local = await run_stalled("local", tmp_path, None)
    async with dev_server() as client:
        temporal = await run_stalled("temporal", tmp_path, client)
        server = await run_stalled("temporal", tmp_path, client, stream="server")
    return {"local": local, "temporal": temporal, "server": server}


async def test_a_stalled_tree_under_parked_wait_says_so_once_waits_and_resumes_on_both_engines(
    both: dict[str, dict[str, Any]],
) -> None:
    shapes = {}
    for engine, run in both.items():
        seen: Observed = run["seen"]
        root, home = run["root"], run["home"]
        result: RunResult = run["result"]
        [worker] = [s["sessionId"] for s in result.subagents]
        names = {root: "<root>", worker: "<worker>", str(home): "<home>"}
        # Once per stall, with the address `dsh send` takes; the live tree hears the same entries.
        assert seen.warnings == [render("T-CLI-STALLED", ids=f"{root}/{worker}")], engine
        assert [r["type"] for r in seen.records].count("waiting") == 1, engine
        waiting = run["waiting"]
        assert seen.waiting_entries == [waiting["parked"]], engine
        # The record follows the worker's aborted turn (the event that parked it).
        at = seen.records.index(waiting)
        worker_ends = [i for i, r in enumerate(seen.records) if r["type"] == "event" and r["sessionId"] == worker
                       and r["event"]["type"] == "turn/end"]
        assert worker_ends and worker_ends[0] < at, engine
        # Resumed: the kept queue first, then the person's message; the run ends as usual.
        assert (result.exit_code, result.output, result.released, result.violations) == (0, "CHILD_DONE", [], []), engine
        events = SessionStore(home).read(worker).events
        assert [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"] == ["Work.", "B", "More."]
        [more] = [e["data"] for e in events if e["type"] == "user/message" and e["data"]["id"] == run["sent"]]
        assert more["source"] == {"kind": "user"}
        assert run["rows"] == {root: (True, "idle"), worker: (True, "parked")}, engine
        status = named(run["status"], names)
        assert isinstance(status.pop("startedAt"), int)
        status.pop("pid")
        shapes[engine] = {"waiting": named(waiting, names), "status": status, "list": named(run["list"], names)}
    local, temporal = shapes["local"], shapes["temporal"]
    assert local["status"] == {"rootSessionId": "<root>", "state": "stalled", "agents": [
        {"sessionId": "<root>", "status": "idle"},
        {"sessionId": "<worker>", "parentSessionId": "<root>", "label": "worker", "status": "parked"}]}
    assert temporal["status"] == local["status"]
    assert local["list"] == {"parentLive": True, "entries": [
        {"sessionId": "<worker>", "parentSessionId": "<root>", "depth": 1, "label": "worker", "status": "parked"}]}
    assert temporal["list"] == local["list"]
    # The client reading the logs from the server (no shared home) says the same.
    assert shapes["server"] == temporal
    # The same record; the Temporal command names its engine (no socket to find).
    [entry] = temporal["waiting"]["parked"]
    assert entry["send"] == local["waiting"]["parked"][0]["send"] + " --engine temporal"
    entry["send"] = local["waiting"]["parked"][0]["send"]
    assert temporal["waiting"] == local["waiting"]
