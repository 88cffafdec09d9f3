"""The turn activity's body (`run_turn`) without a server: the workflow seam is a recording link.

These pin what the workflow relies on: a retried turn does not send a delivery its log holds
(exactly once across a worker's death), the turn heartbeats per model chunk, and `subagent` asks
the workflow for the child the local manager would have made.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import temporal_kit  # noqa: F401  (skips without the temporal extra, fails under CI)

from dsh.loader.agent import user_message
from dsh.loader.engines.turn import run_turn
from dsh.loader.engines.wire import Delivery, RunSpec, StartChild, TreeInput, TurnInput
from dsh.loader.session import SessionStore
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript


@dataclass
class RecordingLink:
    """The workflow as a turn sees it: nothing arrives while the turn runs; requests are kept."""

    children: list[StartChild] = field(default_factory=list)
    beats: int = 0
    polls: list[int] = field(default_factory=list)

    async def poll(self, after: int) -> list[Delivery]:
        self.polls.append(after)
        await asyncio.Event().wait()  # until the turn abandons the poll
        return []

    async def start_child(self, request: StartChild) -> None:
        self.children.append(request)

    async def report(self, delivery: Delivery) -> None:
        raise AssertionError("the root does not report")

    def heartbeat(self) -> None:
        self.beats += 1

    async def publish_facts(self, facts: list[list[Any]]) -> None:
        raise AssertionError("no fences here")

    async def facts_after(self, after: int) -> list[list[Any]]:
        raise AssertionError("no fences here")


def root_turn(home: Path, transcript: str, task: str) -> TurnInput:
    script = load_transcript(transcript)
    run = RunSpec(home=str(home), root_id="session-00000000-0000-4000-8000-000000000001", transcript=str(script.path))
    who = TreeInput(run=run, session_id=run.root_id)
    return TurnInput(agent=who, deliveries=[Delivery(dict(user_message(task, {"kind": "user"})))], offset=0)


async def test_a_retried_turn_does_not_send_a_delivery_its_log_already_holds(tmp_path: Path) -> None:
    spec = root_turn(tmp_path, "hello", "Say hello.")
    first = await run_turn(spec, RecordingLink())
    assert (first.taken, first.stop_reason, first.output, first.violations) == (1, "completed", "Hello from dsh.", [])
    again = await run_turn(spec, RecordingLink())  # the same activity input: a retry after a crash
    assert (again.taken, again.output, again.violations) == (1, "Hello from dsh.", [])
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    inserted = [e for e in events if e["type"] == "agent/inbox/spliced" and e["data"].get("inserted")]
    assert len(inserted) == 1
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1]


async def test_a_turn_heartbeats_per_model_chunk_and_polls_from_its_offset(tmp_path: Path) -> None:
    link = RecordingLink()
    spec = root_turn(tmp_path, "hello", "Say hello.")
    spec.offset = 4
    await run_turn(spec, link)
    assert link.beats >= 1 + 2  # the delivery, then every chunk (text and finish at least)
    assert link.polls == [5]  # the workflow's list continues past the one delivery taken


async def test_subagent_asks_the_workflow_for_the_child_the_manager_would_make(tmp_path: Path) -> None:
    link = RecordingLink()
    spec = root_turn(tmp_path, "background-settlement", "Start a background child.")
    result = await run_turn(spec, link)  # fences not allowed here: step 2 is not held
    [child] = link.children
    assert child.depth == 1
    assert child.descriptor == {"version": 1, "mode": "continuable", "provider": "spawn", "label": "answer child",
                                "model": "replay", "spawnCallId": "start-child"}
    assert child.prompt["content"] == [{"type": "text", "text": "Reply with CHILD_RESULT."}]
    assert child.prompt["source"] == {"kind": "user"}
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    [tool_result] = [e for e in events if e["type"] == "tool/result"]
    assert render("T-SPAWN-BG", id=child.child_id) in str(tool_result["data"])
    assert result.output == "STARTED"


async def test_tools_of_later_slices_answer_a_typed_error_without_touching_the_local_manager(tmp_path: Path) -> None:
    script = tmp_path / "send.yaml"
    script.write_text(
        "version: 1\nname: send\ntask: Message someone.\nagents:\n  root:\n    replies:\n"
        "      - toolCalls:\n          - {id: c1, name: send_message, arguments: {agent_id: session-x, message: hi}}\n"
        "      - text: done\n"
    )
    spec = root_turn(tmp_path, str(script), "Message someone.")
    result = await run_turn(spec, RecordingLink())
    assert (result.output, result.violations) == ("done", [])
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    [tool_result] = [e for e in events if e["type"] == "tool/result"]
    assert render("T-ENGINE-UNSUPPORTED", what="the send_message tool") in str(tool_result["data"])
    assert "ENGINE_UNSUPPORTED" in str(tool_result["data"])


async def test_a_child_turn_returns_its_epochs_notice_and_writes_the_descriptor_once(tmp_path: Path) -> None:
    from dsh.loader.session import make_header
    from dsh.loader.subagents import notice_id, settlement_message

    root = root_turn(tmp_path, "background-settlement", "unused")
    child_id = "session-00000000-0000-4000-8000-000000000002"
    descriptor = {"version": 1, "mode": "continuable", "provider": "spawn", "label": "answer child",
                  "model": "replay", "spawnCallId": "start-child"}
    who = TreeInput(run=root.agent.run, session_id=child_id, parent_id=root.agent.session_id, depth=1,
                    descriptor=descriptor, epoch=1)
    store = SessionStore(tmp_path)  # a worker died right after creating the child's log
    await store.close(await store.create(make_header(child_id, parent_session=who.parent_id, origin="subagent",
                                                     delegation_depth=1)))
    prompt = Delivery(dict(user_message("Reply with CHILD_RESULT.", {"kind": "user"})))
    result = await run_turn(TurnInput(agent=who, deliveries=[prompt], offset=0), RecordingLink())
    events = SessionStore(tmp_path).read(child_id).events
    assert [e["type"] for e in events][:2] == ["subagent/descriptor", "subagent/epoch"]
    assert sum(e["type"] == "subagent/descriptor" for e in events) == 1
    assert (result.stop_reason, result.agent_key, result.violations) == ("completed", "child", [])
    expected = settlement_message(child_id, "completed", [{"type": "text", "text": "CHILD_RESULT"}], epoch=1)
    assert result.notice is not None and result.notice["id"] == notice_id(child_id, 1)
    assert (result.notice["content"], result.notice["source"]) == (expected["content"], expected["source"])
