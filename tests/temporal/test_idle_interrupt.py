"""An interrupt that reaches the idle agent, then the worker's death (issue 12, SPEC §10).

On the local engine an interrupt of an idle agent ends nothing, and a follow-up sent after it runs
its turn. On Temporal the same sequence can reach a turn activity: its agent's turn has just ended
(idle) when the poll hands it the interrupt and, after it, the follow-up B, whose turn 2 then
runs in the same activity. If the worker dies during turn 2, the retry (same input) must know
that the interrupt was applied, or it applies it again and stops its own continued turn 2. The
turn notes it in the log (`engine/interrupt`, loader/engines/interrupts.py) in the cancel's span.

Ordering without sleeps: the first poll's reply is handed when the agent converges after turn 1
(a gate on `Agent.converge`, the idle edge), so the poll applies it before the turn sees the
agent idle. The worker's death is what a SIGKILL leaves: the log's prefix up to turn 2's start
(the log is append-only and in order); the retry is the same activity input.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_turn import RecordingLink, WorkflowLikeLink, root_turn

from dsh.loader.agent import Agent, user_message
from dsh.loader.engines.interrupts import INTERRUPT_EVENT
from dsh.loader.engines.projection import TreeTail
from dsh.loader.engines.turn import run_turn
from dsh.loader.engines.wire import Delivery, InterruptAt, PollReply
from dsh.loader.ndjson import RecordStream
from dsh.loader.session import SessionStore
from dsh.loader.session.envelope import validate_log
from dsh.loader.sinks import RunSinks

SCRIPT = "version: 1\nname: idle\ntask: A.\nagents:\n  root:\n    replies:\n      - text: A_OK\n      - text: B_OK\n"


@dataclass
class IdleEdgeLink(RecordingLink):
    """Its first poll answers `reply` once the agent has converged after its first turn."""

    idle: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    reply: PollReply = field(default_factory=PollReply)

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply:
        self.polls.append(after)
        if len(self.polls) == 1:
            await self.idle  # the test's wait_for around the turn is the backstop
            return self.reply
        await asyncio.Event().wait()  # until the turn abandons the poll
        return PollReply()


async def test_an_interrupt_that_reached_the_idle_agent_is_not_applied_again_by_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = tmp_path / "idle.yaml"
    script.write_text(SCRIPT)
    spec = root_turn(tmp_path, str(script), "A.")
    b = Delivery(dict(user_message("B", {"kind": "user"})))
    stop = InterruptAt(1, {"kind": "user"})  # accepted after A, before B
    link = IdleEdgeLink(reply=PollReply(deliveries=[b], interrupts=[stop]))
    converge = Agent.converge

    def gated(agent: Agent, last_turn: int, wake_requested: bool) -> None:
        # Resolved before the converge it gates, so the poll's wake is queued ahead of the turn's
        # `when_idle` waiter, which `converge` wakes directly (issue 13, `psched`); both run after
        # this call, with the agent idle.
        if not link.idle.done():
            link.idle.set_result(None)
        converge(agent, last_turn, wake_requested)

    monkeypatch.setattr(Agent, "converge", gated)
    first = await asyncio.wait_for(run_turn(spec, link), 20)
    monkeypatch.undo()
    assert (first.taken, first.output) == (2, "B_OK")  # the interrupt ended nothing: B ran as turn 2
    path = tmp_path / "sessions" / spec.agent.session_id / "session.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    events = [json.loads(line) for line in lines[1:]]
    [note] = [e for e in events if e["type"] == INTERRUPT_EVENT]
    assert note["data"] == {"seq": 0, "index": 1, "cause": {"kind": "user"}} and note.get("ignorable") is True
    # The worker dies during turn 2: what survives is the log up to turn 2's start.
    cut = next(i for i, e in enumerate(events) if e["type"] == "turn/start" and e["data"]["turn"] == 2)
    path.write_bytes(b"".join(lines[: cut + 2]))
    retry = WorkflowLikeLink(deliveries=[*spec.deliveries, b], turn_interrupts=[stop])
    again = await asyncio.wait_for(run_turn(spec, retry, retry=True), 20)
    assert (again.taken, again.stop_reason, again.output, again.violations) == (2, "completed", "B_OK", [])
    log = SessionStore(tmp_path).read(spec.agent.session_id).events
    validate_log(log)  # the note is an ignorable event: the log stays valid (§5.1)
    ends = [e["data"]["reason"] for e in log if e["type"] == "turn/end"]
    # Turn 2 closed `interrupted` by the crash repair, then continued to its end (as the local
    # engine ran it): not stopped by the interrupt a second time.
    assert ends == [{"kind": "completed"}, {"kind": "interrupted"}, {"kind": "completed"}]
    assert retry.asked[0] == (1, 1)  # the retry asks only for interrupts past the one applied


async def test_the_interrupt_note_is_not_a_record_of_the_stream(tmp_path: Path) -> None:
    """The client's stream is the local engine's: the engine's own note is skipped."""
    script = tmp_path / "idle.yaml"
    script.write_text(SCRIPT)
    spec = root_turn(tmp_path, str(script), "A.")
    await run_turn(spec, RecordingLink())
    store = SessionStore(tmp_path)
    session = await store.load(spec.agent.session_id)
    session.append(INTERRUPT_EVENT, {"seq": 0, "index": 1, "cause": {"kind": "user"}}, ignorable=True)
    await store.close(session)
    records: list[dict[str, Any]] = []
    stream = RecordStream(records.append)
    stream.init({"type": "init"})
    TreeTail(tmp_path, spec.agent.session_id, RunSinks(records=stream)).poll()
    types = [r["event"]["type"] for r in records if r["type"] == "event"]
    assert "turn/end" in types and INTERRUPT_EVENT not in types
