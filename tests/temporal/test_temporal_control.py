"""`dsh interrupt` and `dsh send` on a temporal-engine run (issue 12 item 3): the CLI reaches the
tree's workflows through the Temporal client, with the socket's authority rules, lines and exit
codes; the interrupted child parks and, under a transcript (`run.parked: release`), its parked
work is released and the run ends, as on the local engine (SPEC §10.3, §17.2).

The tree is interrupt-demo with one fence added, so the interrupt lands on the child's hang (the
root's last step of turn 1 waits for it, and the test waits for that turn's activity to complete in
the root's history: a long-poll, no sleep).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporal_kit import backstopped, dev_server, turn_finished, turn_started
from temporalio.client import Client

from dsh.loader.config import ComposedConfig, TemporalConfig, compose, flag_layer
from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.control import interrupt_workflow, user_call
from dsh.loader.engines.wire import Answer, Interrupt
from dsh.loader.engines.worker import make_worker
from dsh.loader.headless import RunRequest, RunResult, RunSinks
from dsh.loader.host.protocol import RpcError
from dsh.loader.ids import new_root_id
from dsh.loader.session import SessionStore
from dsh.loader.texts import render
from dsh.loader.transcripts import Transcript, load_transcript

from test_seam import env_without_dsh

DSH = [sys.executable, "-c", "from dsh.cli.main import entry; entry()"]


PARK_AND_SEND = """\
version: 1
name: park-and-send
task: Start a child that hangs and queue a follow-up for it.
fences:
  - hold: {agent: root, turn: 1, step: 3, until: {hangReached: {agent: child}}}
agents:
  root:
    replies:
      - toolCalls:
          - {id: start-child, name: subagent, arguments: {label: long task, prompt: Work until stopped.}}
      - toolCalls:
          - {id: queue-more, name: send_message, arguments: {agent_id: "{{child:start-child}}", message: Follow up.}}
      - text: WAITING_FOR_CHILD
      - text: CHILD_DONE
  child:
    spawnedBy: start-child
    replies:
      - hang: {text: working on it}
      - text: FOLLOWUP_OK
      - text: MORE_OK
"""


def fenced_demo(tmp_path: Path) -> Path:
    spec = yaml.safe_load(load_transcript("interrupt-demo").path.read_text())
    spec["name"] = "interrupt-demo-fenced"
    spec["fences"] = [{"hold": {"agent": "root", "turn": 1, "step": 3, "until": {"hangReached": {"agent": "child"}}}}]
    path = tmp_path / "interrupt-demo-fenced.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


async def root_turn_completed(client: Client, root_id: str) -> None:
    """The root workflow's first turn completed (its history, long-polled)."""
    handle = client.get_workflow_handle(root_id)
    turns: set[int] = set()  # event ids where its turns began (not its create activity)
    async for event in handle.fetch_history_events(wait_new_event=True):
        if turn_started(event):
            turns.add(event.event_id)
        if turn_finished(event, turns):
            return


async def dsh(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    import subprocess

    return await asyncio.to_thread(subprocess.run, [*DSH, *args], env=env, cwd=cwd, capture_output=True, text=True,
                                   timeout=120)


async def test_dsh_interrupt_reaches_a_temporal_child_which_parks_and_is_released(tmp_path: Path) -> None:
    home = tmp_path / "home"
    script_path = fenced_demo(tmp_path)
    script = load_transcript(str(script_path))
    composed = compose(transcript=script, environ={}, cwd=tmp_path)
    assert composed.config.run.parked == "release"  # a transcript releases parked work (§17.2)
    async with dev_server() as client:
        async with started_run(client, home, script, composed) as (run, root, child, queue):
            env = env_without_dsh(DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host,
                                  DSH_TEMPORAL__TASK_QUEUE=queue)
            # The workflow's own checks (§10.2), behind the CLI's header check: a user presenting
            # another parent, an agent that is no ancestor.
            stranger = new_root_id()
            with pytest.raises(RpcError) as refused:
                await user_call(client, root, "subagent.interrupt", {"parentSessionId": stranger, "childSessionId": child})
            assert refused.value.data_code == "subagent-unauthorized"
            answer = await interrupt_workflow(client, root, child, Interrupt(kind="parent", caller=stranger))
            assert answer == Answer(code="UNAUTHORIZED", text="T-ERR-NOT-DESCENDANT")
            # Authority as over the socket: the saved headers refuse a wrong parent (exit 2) first.
            wrong = await dsh(["interrupt", f"{stranger}/{child}", "--engine", "temporal", "--home", str(home)], env,
                              tmp_path)
            assert (wrong.returncode, wrong.stdout) == (2, ""), wrong.stderr
            done = await dsh(["interrupt", f"{root}/{child}", "--engine", "temporal", "--home", str(home)], env, tmp_path)
            assert (done.returncode, done.stdout.strip()) == (0, render("T-CLI-INTERRUPTED", child=child)), done.stderr
            result = await asyncio.wait_for(run, 60)
        assert (result.exit_code, result.stop_reason, result.output) == (0, "completed", "WAITING_FOR_CHILD")
        assert (result.violations, result.released) == ([], [child])
        child_events = SessionStore(home).read(child).events
        assert [e["data"]["reason"] for e in child_events if e["type"] == "turn/end"] == [
            {"kind": "aborted", "reason": {"kind": "user"}}]
        # The queued follow-up was parked, then discarded by the release as a canceled splice.
        [canceled] = [e for e in child_events if e["type"] == "agent/inbox/spliced" and e["data"].get("outcome")]
        assert (canceled["data"]["outcome"], canceled["data"]["removedCount"]) == ("canceled", 1)
        # Its notice (aborted) entered the closing root once, injected and never read.
        root_events = SessionStore(home).read(root).events
        notices = [m for e in root_events if e["type"] == "agent/inbox/spliced" for m in e["data"]["inserted"]
                   if m["source"]["kind"] == "subagent-settled"]
        assert [(n["source"]["senderSessionId"], n["source"]["stopReason"]) for n in notices] == [(child, "aborted")]
        assert [e["data"]["turn"] for e in root_events if e["type"] == "turn/start"] == [1]
        # The run is over: an interrupt is the accepted no-op, a follow-up has nowhere to go; the
        # configured engine (no flag) routes there too.
        configured = {**env, "DSH_ENGINE": "temporal"}
        late = await dsh(["interrupt", f"{root}/{child}", "--home", str(home)], configured, tmp_path)
        assert (late.returncode, late.stdout.strip()) == (0, render("T-CLI-NO-RUN", child=child)), late.stderr
        sent = await dsh(["send", f"{root}/{child}", "more", "--home", str(home)], configured, tmp_path)
        assert sent.returncode == 1
        assert sent.stderr.strip() == "dsh: " + render("T-CLI-SEND-NO-RUN", child=child)


async def test_under_parked_wait_a_stalled_temporal_tree_waits_and_dsh_send_resumes_the_parked_child(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    script_path = tmp_path / "park-and-send.yaml"
    script_path.write_text(PARK_AND_SEND)
    script = load_transcript(str(script_path))
    composed = compose(transcript=script, environ={}, cwd=tmp_path, flags=[flag_layer("--parked", "run.parked", "wait")])
    async with dev_server() as client:
        async with started_run(client, home, script, composed) as (run, root, child, queue):
            env = env_without_dsh(DSH_TEMPORAL__ADDRESS=client.service_client.config.target_host,
                                  DSH_TEMPORAL__TASK_QUEUE=queue, DSH_ENGINE="temporal")
            done = await dsh(["interrupt", f"{root}/{child}", "--home", str(home)], env, tmp_path)
            assert done.returncode == 0, done.stderr
            # Parked and stalled, the tree waits (`wait`) instead of releasing: the child's
            # workflow tells the root, and the run is still going when the follow-up is sent.
            child_handle = client.get_workflow_handle(f"{root}/{child}")
            await asyncio.wait_for(child_signalled_stalled(client, root), 60)
            assert not run.done()
            sent = await dsh(["send", f"{root}/{child}", "More.", "--home", str(home)], env, tmp_path)
            assert sent.returncode == 0, sent.stderr
            message_id = sent.stdout.strip()
            result = await asyncio.wait_for(run, 60)
            await child_handle.result()
        assert (result.exit_code, result.output, result.released, result.violations) == (0, "CHILD_DONE", [], [])
        child_events = SessionStore(home).read(child).events
        entered = [e["data"]["content"][0]["text"] for e in child_events if e["type"] == "user/message"]
        assert entered == ["Work until stopped.", "Follow up.", "More."]  # the kept queue first, FIFO
        [more] = [e["data"] for e in child_events if e["type"] == "user/message" and e["data"]["id"] == message_id]
        assert more["source"] == {"kind": "user"}
        ends = [e["data"]["reason"]["kind"] for e in child_events if e["type"] == "turn/end"]
        assert ends == ["aborted", "completed", "completed"]


@asynccontextmanager
async def started_run(
    client: Client, home: Path, script: Transcript, composed: ComposedConfig
) -> AsyncIterator[tuple[asyncio.Task[RunResult], str, str, str]]:
    """The tree running on its own task queue, with a worker in this process, once the root's
    first turn has ended: (the run, the root's id, its `start-child` child's id, the queue)."""
    queue = f"dsh-test-{uuid.uuid4().hex[:8]}"
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    request = RunRequest(home=home, config=backstopped(composed.config), transcript=script,
                         fences_allowed=composed.fences_allowed, sinks=RunSinks(on_started=started.set_result))
    async with make_worker(client, queue):
        run = asyncio.create_task(run_tree_temporal(request, TemporalConfig(task_queue=queue), client=client))
        root = await asyncio.wait_for(started, 60)
        await asyncio.wait_for(root_turn_completed(client, root), 60)
        [spawn] = [e for e in SessionStore(home).read(root).events
                   if e["type"] == "tool/result" and e["data"]["callId"] == "start-child"]
        yield run, root, spawn["data"]["value"]["sessionId"], queue


async def child_signalled_stalled(client: Client, root_id: str) -> None:
    """The root's history holds a `child_state` signal saying stalled (long-polled)."""
    handle = client.get_workflow_handle(root_id)
    async for event in handle.fetch_history_events(wait_new_event=True):
        attrs = event.workflow_execution_signaled_event_attributes
        if event.HasField("workflow_execution_signaled_event_attributes") and attrs.signal_name == "child_state":
            if json.loads(attrs.input.payloads[0].data)["stalled"]:
                return


async def test_an_interrupt_after_the_root_closed_answers_no_run_while_a_childs_workflow_is_still_open(
    tmp_path: Path,
) -> None:
    """A child's run signals its notice and then closes, and one whose workers are gone stays open:
    once the root has closed, `dsh interrupt` answers NO-RUN (the socket's NoLiveRun) at once
    instead of holding an update that no worker will ever answer (CI saw a 120 s hang)."""
    from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError

    home = tmp_path / "home"
    script = load_transcript(str(fenced_demo(tmp_path)))
    composed = compose(transcript=script, environ={}, cwd=tmp_path)
    async with dev_server() as client:
        async with started_run(client, home, script, composed) as (run, root, child, _queue):
            await client.get_workflow_handle(root).terminate("by hand")
            with pytest.raises(WorkflowFailureError):
                await asyncio.wait_for(run, 60)
        # The worker is gone; the child's workflow (started ABANDON) is still open, its turn hanging.
        child_handle = client.get_workflow_handle(f"{root}/{child}")
        assert (await child_handle.describe()).status == WorkflowExecutionStatus.RUNNING
        answer = await asyncio.wait_for(
            user_call(client, root, "subagent.interrupt", {"parentSessionId": root, "childSessionId": child}), 10)
        assert answer is None
        sent = await asyncio.wait_for(user_call(client, root, "subagent.prompt", {
            "parentSessionId": root, "childSessionId": child, "message": "more"}), 10)
        assert sent is None
        await child_handle.terminate("test over")
