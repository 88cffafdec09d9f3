"""An interrupt and a worker's death (issue 12, SPEC §10): an interrupt accepted while the turn's
worker is dead (SIGKILLed, the turn not yet retried) is applied exactly once, by the retry, even
though an earlier turn of the same child was interrupted too: what a dead attempt applied is read
from this turn's part of the log only (turn.py `interrupts_in_log`). The other half, an interrupt
the dead attempt did apply, is tests/temporal/test_turn.py's
`test_a_retry_does_not_run_again_the_turn_its_dead_attempt_interrupted`.

Ordering without sleeps: one fence holds every step 1 of the worker until its turn 3 has ended,
so each of its turns waits at its first step until an interrupt aborts it (a held step is
released by the abort; no reply is ever asked of the model). The test learns that a step is
held from the tree's fence board, as test_faults.py does.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

from temporal_kit import dev_server
from temporalio.client import Client
from test_faults import HEARTBEAT, dsh_worker, inserted

from dsh.loader.engines.client import run_tree_temporal
from dsh.loader.engines.control import user_call
from dsh.loader.headless import RunRequest
from dsh.loader.session import SessionStore
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.runner import plan_flow

BACKSTOP = 120  # a loud failure, never an ordering
FENCE_TIMEOUT = 45.0  # an interrupt not applied shows as this fence's timeout

SCRIPT = """\
version: 1
name: interrupt-while-dead
task: Start a worker and note how it ends.
fences:
  - hold: {agent: w, step: 1, until: {all: [{turnEnded: {agent: w, turn: 3}}, {turnEnded: {agent: root, turn: 1}}]}}
agents:
  root:
    replies:
      - toolCalls: [{id: start-w, name: subagent, arguments: {label: worker, prompt: Work until stopped.}}]
      - toolCalls: [{id: queue, name: send_message, arguments: {agent_id: "{{child:start-w}}", message: Queued.}}]
      - text: STARTED
      - text: NOTED
  w:
    spawnedBy: start-w
    replies:
      - text: GO_ON_OK
      - text: FINISH_OK
"""


# The fence names root's turn 1 as well (it ends long before w's turn 3) so that root's facts go on
# the board, which carries only the facts of agents a fence names: `board_holds` reads them there.


async def board_holds(client: Client, root_id: str, wanted: list[list[Any]]) -> None:
    """Every fact in `wanted` is on the root's fence board (its long-poll update)."""
    board = client.get_workflow_handle(root_id)
    facts: list[list[Any]] = []
    while not all(f in facts for f in wanted):
        facts += await asyncio.wait_for(board.execute_update("fence_facts_after", len(facts), result_type=list),
                                        BACKSTOP)


async def test_an_interrupt_accepted_while_the_worker_is_dead_is_applied_once_by_the_retry(tmp_path: Path) -> None:
    path = tmp_path / "interrupt-while-dead.yaml"
    path.write_text(SCRIPT)
    plan = plan_flow(path)
    queue = f"fault-interrupt-{uuid.uuid4().hex[:8]}"
    temporal = plan.config.temporal.model_copy(update={"task_queue": queue, "heartbeat_timeout_seconds": HEARTBEAT})
    testing = plan.config.testing.model_copy(update={"fence_timeout_seconds": FENCE_TIMEOUT})
    run_section = plan.config.run.model_copy(update={"parked": "wait"})  # the parked worker waits for us
    config = plan.config.model_copy(update={"temporal": temporal, "testing": testing, "run": run_section})
    home = tmp_path / "home"
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    request = RunRequest(home=home, config=config, transcript=plan.script, fences_allowed=True,
                         sinks=RunSinks(on_started=started.set_result))
    async with dev_server() as client:
        address = client.service_client.config.target_host
        with dsh_worker(address, queue, tmp_path) as first:
            run = asyncio.create_task(run_tree_temporal(request, temporal, client=client))
            root = await asyncio.wait_for(started, BACKSTOP)
            await board_holds(client, root, [["step", "w", 1, 1], ["step", "root", 1, 3]])
            [spawn] = [e for e in SessionStore(home).read(root).events
                       if e["type"] == "tool/result" and e["data"]["callId"] == "start-w"]
            child = spawn["data"]["value"]["sessionId"]
            address_of = {"parentSessionId": root, "childSessionId": child}
            # Turn 1: interrupted by its live worker (the earlier interrupt of this child).
            assert await user_call(client, root, "subagent.interrupt", address_of) == {"accepted": True}
            await board_holds(client, root, [["turnEnded", "w", 1], ["turnEnded", "root", 1]])
            # Turn 2, for a follow-up: held at step 1, then its worker dies.
            sent = await user_call(client, root, "subagent.prompt", {**address_of, "message": "Go on."})
            assert sent is not None
            await board_holds(client, root, [["step", "w", 2, 1]])
            os.killpg(first.pid, signal.SIGKILL)
            assert await asyncio.to_thread(first.wait) == -signal.SIGKILL
        # Accepted by the child's workflow for the running turn, whose worker is gone (the update
        # runs on the next worker's workflow task; before the retry or after it started, the
        # dead attempt never saw it).
        interrupt = asyncio.create_task(user_call(client, root, "subagent.interrupt", address_of))
        assert not run.done()
        with dsh_worker(address, queue, tmp_path) as second:
            assert await asyncio.wait_for(interrupt, BACKSTOP) == {"accepted": True}
            # Sent after that interrupt: it resumes the kept queue (§10.3), so the tree finishes.
            assert await user_call(client, root, "subagent.prompt", {**address_of, "message": "Finish."}) is not None
            result = await asyncio.wait_for(run, BACKSTOP)
            second.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(second.wait, 60) == 0
    store = SessionStore(home)
    events = store.read(child).events
    assert (result.stop_reason, result.output, result.violations, result.exit_code) == ("completed", "NOTED", [], 0)
    # Turn 2 was cut off by the kill (closed `interrupted` by repair); the retry ran the queue it
    # restored as turn 3 and the interrupt stopped it: aborted once, by that second interrupt.
    # "Finish.", sent after it, resumed the kept queue: Go on. and Finish. ran as turns 4 and 5.
    assert [e["data"]["reason"] for e in events if e["type"] == "turn/end"] == [
        {"kind": "aborted", "reason": {"kind": "user"}}, {"kind": "interrupted"},
        {"kind": "aborted", "reason": {"kind": "user"}}, {"kind": "completed"}, {"kind": "completed"}]
    entered = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert entered == ["Go on.", "Finish."]  # the held and aborted steps entered nothing
    notices = [m for m in inserted(store, root) if m["source"]["kind"] == "subagent-settled"]
    assert [(n["source"]["senderSessionId"], n["source"]["stopReason"]) for n in notices] == [(child, "completed")]
