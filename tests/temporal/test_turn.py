"""The turn activity's body (`run_turn`) without a server: the workflow seam is a recording link.

These pin what the workflow relies on: a retried turn does not send a delivery its log holds
(exactly once across a worker's death), the turn heartbeats per model chunk, `subagent` asks
the workflow for the child the local manager would have made, an interrupt handed through the poll
is the core's own cancel that keeps queued work (parked, SPEC §10.3), a release clears it, and the
cold-resume header checks refuse as the manager does.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import temporal_kit  # noqa: F401  (skips without the temporal extra, fails under CI)

from dsh.loader.agent import user_message
from dsh.loader.engines.backends import resume_check
from dsh.loader.engines.refusals import MESSAGE_LIMIT
from dsh.loader.engines.turn import run_turn
from dsh.loader.engines.wire import (
    Answer,
    Charge,
    Charged,
    Delivery,
    Interrupt,
    InterruptAt,
    MessageChild,
    PollReply,
    ResumeCheck,
    ResumeFound,
    RunSpec,
    StartChild,
    TreeInput,
    TurnInput,
)
from dsh.loader.models.budget import RunBudget
from dsh.loader.session import SessionStore
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript


@dataclass
class RecordingLink:
    """The workflow as a turn sees it: nothing arrives while the turn runs; requests are kept."""

    children: list[StartChild] = field(default_factory=list)
    beats: int = 0
    polls: list[int] = field(default_factory=list)
    replies: list[PollReply] = field(default_factory=list)  # handed out one per poll, then nothing
    messages: list[MessageChild] = field(default_factory=list)
    answer: Answer = field(default_factory=lambda: Answer(status="delivered"))
    interrupts: list[tuple[str, Interrupt]] = field(default_factory=list)
    listed: list[list[str]] = field(default_factory=list)
    # (reply index, beats): hand that reply only once the turn has heartbeaten that often
    gate: tuple[int, int] | None = None
    beat: asyncio.Event = field(default_factory=asyncio.Event)
    budget: RunBudget = field(default_factory=RunBudget)  # the root workflow's, as its `charge` keeps it

    async def charge(self, charge: Charge) -> Charged:
        if charge.kind == "tokens":
            self.budget.tokens += charge.tokens
            return Charged()
        return Charged(refused=self.budget.count(charge.kind))

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply:
        self.polls.append(after)
        if self.gate is not None and len(self.polls) - 1 == self.gate[0]:
            while self.beats < self.gate[1]:
                self.beat.clear()
                await asyncio.wait_for(self.beat.wait(), 30)  # backstop only: the stream beats
        if self.replies:
            return self.replies.pop(0)
        await asyncio.Event().wait()  # until the turn abandons the poll
        return PollReply()

    async def message_child(self, request: MessageChild) -> Answer:
        self.messages.append(request)
        return self.answer

    async def interrupt(self, target: str, request: Interrupt) -> Answer | None:
        self.interrupts.append((target, request))
        return None

    async def statuses(self, ids: list[str]) -> dict[str, str]:
        self.listed.append(list(ids))
        return {i: "parked" for i in ids}

    async def start_child(self, request: StartChild) -> bool:
        self.children.append(request)
        return True

    async def running_children(self) -> int:
        return len(self.children)

    async def report(self, delivery: Delivery) -> None:
        raise AssertionError("the root does not report")

    def heartbeat(self) -> None:
        self.beats += 1
        self.beat.set()

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


async def test_subagent_writes_the_child_session_and_list_agents_takes_its_status_from_the_workflows(
    tmp_path: Path,
) -> None:
    script = tmp_path / "list.yaml"
    script.write_text(
        "version: 1\nname: list\ntask: List them.\nagents:\n  root:\n    replies:\n"
        "      - toolCalls:\n          - {id: c0, name: subagent, arguments: {label: alpha, prompt: Work.}}\n"
        "      - toolCalls:\n          - {id: c1, name: list_agents, arguments: {}}\n"
        "      - text: done\n  alpha:\n    spawnedBy: c0\n    replies:\n      - text: unused\n"
    )
    spec = root_turn(tmp_path, str(script), "List them.")
    link = RecordingLink()
    result = await run_turn(spec, link)
    assert (result.output, [v["code"] for v in result.violations]) == ("done", [])
    [child] = link.children
    log = SessionStore(tmp_path).read(child.child_id)  # header and descriptor, as the manager writes them
    assert (log.header["parentSession"], log.header["origin"], log.header["delegationDepth"]) == (
        spec.agent.session_id, "subagent", 1)
    assert [e["type"] for e in log.events] == ["subagent/descriptor"]
    assert link.listed == [[child.child_id]]
    results = [e for e in SessionStore(tmp_path).read(spec.agent.session_id).events if e["type"] == "tool/result"]
    assert render("T-LIST-ROW", id=child.child_id, status="parked", label="alpha") in str(results[1]["data"])


def scripted(tmp_path: Path, name: str, calls: str, task: str = "Go.") -> Path:
    script = tmp_path / f"{name}.yaml"
    script.write_text(
        f"version: 1\nname: {name}\ntask: {task}\nagents:\n  root:\n    replies:\n"
        f"      - toolCalls:\n          - {calls}\n      - text: done\n"
    )
    return script


def tool_result_text(home: Path, session_id: str) -> str:
    [tool_result] = [e for e in SessionStore(home).read(session_id).events if e["type"] == "tool/result"]
    return str(tool_result["data"])


async def test_send_message_goes_to_the_callers_workflow_and_a_refusal_reads_as_the_managers(tmp_path: Path) -> None:
    spec = root_turn(tmp_path, str(scripted(tmp_path, "send", "{id: c1, name: send_message, arguments: "
                                            "{agent_id: session-x, message: hi}}")), "Go.")
    link = RecordingLink(answer=Answer(code="UNAUTHORIZED", text="T-ERR-NOT-PARENT"))
    result = await run_turn(spec, link)
    assert result.violations == []
    [sent] = link.messages
    assert sent.child_id == "session-x"
    assert sent.message["content"] == [{"type": "text", "text": "hi"}]
    assert sent.message["source"] == {"kind": "coordinator", "form": "relay", "senderSessionId": spec.agent.session_id}
    text = tool_result_text(tmp_path, spec.agent.session_id)
    assert render("T-TOOL-ERROR", code="UNAUTHORIZED", message=render("T-ERR-NOT-PARENT", id="session-x")) in text


async def test_interrupt_agent_refuses_the_caller_itself_and_a_target_without_a_workflow_is_a_no_op(
    tmp_path: Path,
) -> None:
    root_id = "session-00000000-0000-4000-8000-000000000001"
    spec = root_turn(tmp_path, str(scripted(tmp_path, "self", f"{{id: c1, name: interrupt_agent, arguments: "
                                            f"{{agent_id: {root_id}}}}}")), "Go.")
    link = RecordingLink()
    await run_turn(spec, link)
    assert link.interrupts == []  # refused before any workflow is asked (§10.2 check 2)
    assert render("T-ERR-SELF", aid=root_id) in tool_result_text(tmp_path, root_id)
    other = tmp_path / "other"
    spec = root_turn(other, str(scripted(tmp_path, "gone", "{id: c1, name: interrupt_agent, arguments: "
                                         "{agent_id: session-gone}}")), "Go.")
    link = RecordingLink()
    await run_turn(spec, link)
    assert link.interrupts == [("session-gone", Interrupt(kind="parent", caller=root_id))]
    assert render("T-INTERRUPT", id="session-gone") in tool_result_text(other, root_id)


def hanging(tmp_path: Path) -> Path:
    script = tmp_path / "hang.yaml"
    script.write_text("version: 1\nname: hang\ntask: Hang.\nagents:\n  root:\n    replies:\n"
                      "      - hang: {text: working}\n      - text: B_OK\n")
    return script


async def test_an_interrupt_through_the_poll_cancels_the_turn_and_keeps_queued_work_parked(tmp_path: Path) -> None:
    spec = root_turn(tmp_path, str(hanging(tmp_path)), "Hang.")
    b = Delivery(dict(user_message("B", {"kind": "user"})))
    # B arrives while the turn runs, then the interrupt (accepted after both deliveries), once the
    # hang's prefix streamed (beats: the task, B, the chunk): the hang's reply is consumed.
    link = RecordingLink(replies=[PollReply(deliveries=[b]), PollReply(interrupts=[InterruptAt(2, {"kind": "parent"})])],
                         gate=(1, 3))
    result = await run_turn(spec, link)
    assert (result.taken, result.parked) == (2, [b.message["id"]])
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    ends = [e["data"]["reason"] for e in events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    assert not any(e["data"].get("outcome") == "canceled" for e in events if e["type"] == "agent/inbox/spliced")
    # The next turn (a waking delivery D) rebuilds the agent and runs the kept queue first, FIFO.
    d = Delivery(dict(user_message("D", {"kind": "user"})))
    script = tmp_path / "hang.yaml"
    script.write_text(script.read_text() + "      - text: D_OK\n")
    nxt = TurnInput(agent=spec.agent, deliveries=[d], offset=2, seq=1, parked=result.parked)
    again = await run_turn(nxt, RecordingLink())
    assert (again.parked, again.output) == ([], "D_OK")
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    entered = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert entered == ["Hang.", "B", "D"]


async def test_an_interrupt_is_applied_between_the_deliveries_it_arrived_between(tmp_path: Path) -> None:
    """Interrupt, then B (one poll reply, hang reached): B latches during the convergence and runs
    (§10.3), so nothing is parked; applied after B instead, B would stay queued."""
    spec = root_turn(tmp_path, str(hanging(tmp_path)), "Hang.")
    b = Delivery(dict(user_message("B", {"kind": "user"})))
    link = RecordingLink(replies=[PollReply(deliveries=[b], interrupts=[InterruptAt(1, {"kind": "parent"})])],
                         gate=(0, 2))
    result = await run_turn(spec, link)
    assert (result.taken, result.parked, result.output) == (2, [], "B_OK")


@dataclass
class WorkflowLikeLink(RecordingLink):
    """Polls answered as the workflow answers them: the deliveries past `after` and the turn's
    interrupts past the count the turn says it applied (each poll's arguments recorded)."""

    deliveries: list[Delivery] = field(default_factory=list)
    turn_interrupts: list[InterruptAt] = field(default_factory=list)
    asked: list[tuple[int, int]] = field(default_factory=list)

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply:
        self.asked.append((after, interrupts))
        if len(self.deliveries) > after or len(self.turn_interrupts) > interrupts:
            return PollReply(deliveries=self.deliveries[after:], interrupts=self.turn_interrupts[interrupts:])
        await asyncio.Event().wait()  # until the turn abandons the poll
        return PollReply()


async def test_a_retry_does_not_run_again_the_turn_its_dead_attempt_interrupted(tmp_path: Path) -> None:
    """The first attempt took B, then the interrupt: its turn ended aborted with B parked, and its
    worker died before the result was recorded. The retry (the same input) reads from the log that
    the interrupt ended the turn: it runs nothing (without that, the restored B would run as turn
    2 and the interrupt, handed again, would stop it a second time). The workflow hands B to the
    next turn, which keeps it parked."""
    spec = root_turn(tmp_path, str(hanging(tmp_path)), "Hang.")
    b = Delivery(dict(user_message("B", {"kind": "user"})))
    stop = InterruptAt(2, {"kind": "user"})
    first = await run_turn(spec, RecordingLink(replies=[PollReply(deliveries=[b]), PollReply(interrupts=[stop])],
                                               gate=(1, 3)))
    assert first.parked == [b.message["id"]]
    link = WorkflowLikeLink(deliveries=[*spec.deliveries, b], turn_interrupts=[stop])
    again = await run_turn(spec, link, retry=True)
    assert (again.taken, again.violations) == (1, [])
    nxt = await run_turn(TurnInput(agent=spec.agent, deliveries=[b], offset=again.taken, seq=1), RecordingLink())
    assert (nxt.taken, nxt.parked) == (1, [b.message["id"]])
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1]
    assert [e["data"]["reason"] for e in events if e["type"] == "turn/end"] == [
        {"kind": "aborted", "reason": {"kind": "user"}}]


async def test_a_release_turn_cancels_the_agent_and_discards_its_queue_as_canceled_splices(tmp_path: Path) -> None:
    spec = root_turn(tmp_path, str(hanging(tmp_path)), "Hang.")
    b = Delivery(dict(user_message("B", {"kind": "user"})))
    link = RecordingLink(replies=[PollReply(deliveries=[b]), PollReply(interrupts=[InterruptAt(2, {"kind": "parent"})])],
                         gate=(1, 3))
    parked = await run_turn(spec, link)
    released = await run_turn(TurnInput(agent=spec.agent, deliveries=[], offset=2, seq=1, parked=parked.parked,
                                        release=True), RecordingLink())
    assert released.parked == []
    events = SessionStore(tmp_path).read(spec.agent.session_id).events
    [canceled] = [e for e in events if e["type"] == "agent/inbox/spliced" and e["data"].get("outcome") == "canceled"]
    assert canceled["data"]["removedCount"] == 1
    assert [e["data"]["turn"] for e in events if e["type"] == "turn/start"] == [1]


async def test_the_cold_resume_checks_refuse_as_the_manager_does_and_find_the_next_epoch(tmp_path: Path) -> None:
    from dsh.loader.session import make_header

    parent, child = "session-00000000-0000-4000-8000-000000000001", "session-00000000-0000-4000-8000-000000000002"
    home = str(tmp_path)
    assert resume_check(ResumeCheck(home, parent, "not an id")) == ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-FOUND")
    assert resume_check(ResumeCheck(home, parent, child)) == ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-FOUND")
    store = SessionStore(tmp_path)
    session = await store.create(make_header(child, parent_session=parent, origin="subagent", delegation_depth=1))
    await store.close(session)
    assert resume_check(ResumeCheck(home, "session-00000000-0000-4000-8000-000000000009", child)) == ResumeFound(
        code="UNAUTHORIZED", text="T-ERR-NOT-PARENT")
    assert resume_check(ResumeCheck(home, parent, child)) == ResumeFound(code="NOT_RESUMABLE", text="T-ERR-NOT-CONTINUABLE")
    session = await store.load(child)
    descriptor = {"version": 1, "mode": "continuable", "provider": "spawn", "label": "w", "model": "replay",
                  "spawnCallId": "c"}
    session.append("subagent/descriptor", descriptor)
    session.append("subagent/epoch", {"epoch": 1}, ignorable=True)
    await store.close(session)
    found = resume_check(ResumeCheck(home, parent, child))
    assert found == ResumeFound(descriptor=descriptor, depth=1, epoch=2, header=store.read(child).header)
    assert found.header is not None and found.header["parentSession"] == parent  # the next epoch's create activity


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


@dataclass
class BoardLink(RecordingLink):
    """A link whose fence board records what the turn publishes and from where it mirrors."""

    published: list[list[Any]] = field(default_factory=list)
    mirrored: list[int] = field(default_factory=list)

    async def publish_facts(self, facts: list[list[Any]]) -> None:
        self.published += facts

    async def facts_after(self, after: int) -> list[list[Any]]:
        self.mirrored.append(after)
        await asyncio.Event().wait()  # nothing new on the board until the turn abandons the poll
        return []


async def test_only_a_turn_a_fence_can_hold_mirrors_the_board_and_only_named_agents_facts_are_published(
    tmp_path: Path,
) -> None:
    # background-settlement holds root step 2 only, until root's inbox accepted the notice: the
    # child's turn needs no other agent's facts, so it mirrors none (each mirror answer would be
    # recorded in the root's history, issue 12), and no fence reads the child's facts, so it
    # publishes none; the root's turn publishes its own.
    from dataclasses import replace

    base = root_turn(tmp_path, "background-settlement", "Start it.")
    run = replace(base.agent.run, fences=True, fences_allowed=True, fence_timeout=0.2)
    child_id = "session-00000000-0000-4000-8000-000000000002"
    descriptor = {"version": 1, "mode": "continuable", "provider": "spawn", "label": "answer child",
                  "model": "replay", "spawnCallId": "start-child"}
    child = TreeInput(run=run, session_id=child_id, parent_id=run.root_id, depth=1, descriptor=descriptor, epoch=1)
    prompt = Delivery(dict(user_message("Reply with CHILD_RESULT.", {"kind": "user"})))
    link = BoardLink()
    result = await run_turn(TurnInput(agent=child, deliveries=[prompt], offset=0), link)
    assert (result.stop_reason, result.agent_key, result.violations) == ("completed", "child", [])
    assert link.mirrored == []
    assert link.published == []
    # The root, which the fence holds at step 2, mirrors from the board's start; with no notice on
    # the board its hold times out (0.2 s), which only shows it waited.
    root_link = BoardLink()
    root = await run_turn(replace(base, agent=replace(base.agent, run=run)), root_link)
    assert root_link.mirrored == [0]
    assert [v["code"] for v in root.violations] == ["FENCE_TIMEOUT"]
    assert ["step", "root", 1, 1] in root_link.published and all(f[1] == "root" for f in root_link.published)


@dataclass
class MovingLink(RecordingLink):
    """A run that continues as new mid-turn (README "A turn across runs"): it answers `moved`,
    and keeps what the turn's log on disk held when the turn said `durable`."""

    home: Path = Path()
    session_id: str = ""
    durable: list[tuple[int, str]] = field(default_factory=list)

    async def poll(self, after: int, interrupts: int, *, durable: bool = False, pages: bool = False) -> PollReply:
        if durable:  # the log from disk, as a new worker would read it
            self.durable.append((after, (self.home / "sessions" / self.session_id / "session.jsonl").read_text()))
        return await super().poll(after, interrupts, durable=durable, pages=pages)


async def test_a_turn_told_its_run_moved_says_so_only_once_its_log_holds_what_it_took(tmp_path: Path) -> None:
    """The new run carries only the deliveries from the durable poll's `after` on: every one
    before it must be in the turn's log on disk by then, or a retry after a crash would lose it.
    Here the one before it is steered in mid-stream (no step checkpoint has written it yet)."""
    script = tmp_path / "two.yaml"
    script.write_text("version: 1\nname: two\ntask: Go.\nagents:\n  root:\n    replies:\n"
                      "      - text: ONE\n      - text: TWO\n")
    spec = root_turn(tmp_path, str(script), "Go.")
    spec.agent.run.batch_delay_ms = 60_000  # writes wait for a barrier (or a minute)
    steered = Delivery(dict(user_message("And then?", {"kind": "user"})), send="steer")
    link = MovingLink(replies=[PollReply(deliveries=[steered]), PollReply(moved=True)], gate=(0, 2),
                      home=tmp_path, session_id=spec.agent.session_id)
    result = await run_turn(spec, link)
    assert (result.output, result.violations) == ("TWO", [])
    [(after, on_disk)] = link.durable
    assert after == 2 and str(steered.message["id"]) in on_disk  # both taken, both on disk


async def test_a_retry_in_a_later_run_counts_the_deliveries_before_its_base_taken(tmp_path: Path) -> None:
    """A turn retried after its run moved polls from its own offset; the new run holds deliveries
    from `base` on (the earlier ones are in the log, made durable before the move), so the retry
    counts them taken and the workflow's `handed` stays right."""
    spec = root_turn(tmp_path, "hello", "Say hello.")
    link = RecordingLink(replies=[PollReply(base=3)])
    result = await run_turn(spec, link, retry=True)
    assert result.taken == 3 and link.polls[:2] == [1, 3]


async def test_a_later_turn_binds_the_children_its_log_shows_it_spawned_with_none_in_its_input(tmp_path: Path) -> None:
    """A turn's input carries only the resident children (README "Large payloads"): one spawned in
    an earlier turn, and settled since, is bound for `{{child:...}}` from the agent's log."""
    script = tmp_path / "later.yaml"
    script.write_text(
        "version: 1\nname: later\ntask: Go.\nagents:\n  root:\n    replies:\n"
        "      - toolCalls:\n          - {id: c0, name: subagent, arguments: {label: alpha, prompt: Work.}}\n"
        "      - text: STARTED\n"
        "      - toolCalls:\n          - {id: c1, name: send_message, arguments: {agent_id: '{{child:c0}}', message: More.}}\n"
        "      - text: SENT\n  alpha:\n    spawnedBy: c0\n    replies:\n      - text: unused\n"
    )
    first = root_turn(tmp_path, str(script), "Go.")
    link = RecordingLink()
    assert (await run_turn(first, link)).output == "STARTED"
    [child] = link.children
    later = TurnInput(agent=first.agent, deliveries=[Delivery(dict(user_message("Again.", {"kind": "user"})))],
                      offset=1, seq=1)
    assert later.children == []
    result = await run_turn(later, link)
    assert (result.output, result.violations) == ("SENT", [])
    [sent] = link.messages
    assert sent.child_id == child.child_id


async def test_a_prompt_or_message_past_what_a_payload_carries_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    """The server refuses a payload over 2 MB: a `subagent` prompt or a `send_message` past
    MESSAGE_LIMIT is the tool error MESSAGE_TOO_LARGE, and nothing is started, charged or sent (the
    update carrying it would be refused, and the turn failed on it)."""
    big = "x" * (MESSAGE_LIMIT + 1)
    script = tmp_path / "big.json"
    script.write_text(json.dumps({"version": 1, "name": "big", "task": "Go.", "agents": {"root": {"replies": [
        {"toolCalls": [{"id": "c0", "name": "subagent", "arguments": {"label": "alpha", "prompt": big}},
                       {"id": "c1", "name": "send_message", "arguments": {"agent_id": "session-x", "message": big}}]},
        {"text": "done"}]}}}))
    spec = root_turn(tmp_path, str(script), "Go.")
    link = RecordingLink()
    result = await run_turn(spec, link)
    assert (result.output, result.violations) == ("done", [])
    assert link.children == [] and link.messages == [] and link.budget.children == 0
    errors = [e["data"]["error"] for e in SessionStore(tmp_path).read(spec.agent.session_id).events
              if e["type"] == "tool/result"]
    assert [e["code"] for e in errors] == ["MESSAGE_TOO_LARGE", "MESSAGE_TOO_LARGE"]
    assert errors[0]["message"].startswith("the prompt is ") and errors[1]["message"].startswith("the message is ")
    assert [p.parent.name for p in (tmp_path / "sessions").glob("*/session.jsonl")] == [spec.agent.session_id]
