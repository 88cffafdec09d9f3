"""Crash windows of the session store (issue 9, items 1, 2 and 6a), one deterministic test each.

A crash is a log (or a directory) in the state a SIGKILL leaves: hand-made lines, or the on-disk
state copied at a known point of a real run (a pre-step hook after the checkpoint; a `create_step`
of the store's I/O seam before each system call of `create`). Nothing is mocked: loading goes
through the real `SessionStore`, the inbox is the real one, and resumes run the real tree.

Rules pinned here:
- "claim and entry are one durable fact": a message a claim removed in the crash-open turn and no
  `user/message` entered is back in its queue, at the head where the claim took it, after load.
- "a re-queued claim counts for nothing" in the fold, so that turn does not read as `aborted`.
- "a session file appears complete or not at all": a kill anywhere in `create` leaves a complete
  session or a never-materialized directory (`SESSION_UNMATERIALIZED`, not `SESSION_CORRUPT`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.abort import AbortController
from dsh.loader.agent import Agent, Inbox, PreStep, epoch_stop_reason, fold_consumed_work, user_message
from dsh.loader.errors import SessionError, SubagentError
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.ids import new_child_id
from dsh.loader.models import ModelRequest, ReplayProvider
from dsh.loader.session import (
    REQUEUED,
    FileIO,
    Session,
    SessionStore,
    interrupted_turn_closers,
    is_unmaterialized,
    make_header,
    prune_unmaterialized,
    read,
    replay_inbox,
    validate_log,
)
from dsh.loader.session._fileio import CREATE_STEPS, TEMP_PREFIX, CreateStep
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript

from .helpers import assistant_with_calls, build_log, file_events, line, write_session_file

ROOT = "session-11111111-1111-4111-8111-111111111111"
TASK_ID = "52a2cd6f-18b4-4410-b68b-51a9e4e1a450"


def msg(text: str, mid: str | None = None) -> dict[str, Any]:
    return user_message(text, {"kind": "user"}, id=mid or f"m-{text}")


def insert(target: str, start: int, m: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return ("agent/inbox/spliced", {"target": target, "start": start, "inserted": [m]})


def claim(target: str, count: int) -> tuple[str, dict[str, Any]]:
    return ("agent/inbox/spliced", {"target": target, "start": 0, "inserted": [], "removedCount": count})


def requeue(target: str, *messages: dict[str, Any]) -> dict[str, Any]:
    return {"target": target, "start": 0, "inserted": list(messages), "outcome": REQUEUED}


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"][0]["text"] for m in messages]


REPRO = [  # the issue's log, line for line after the header
    insert("next-turn", 0, {"id": TASK_ID, "role": "user", "content": [{"type": "text", "text": "ROOT_TASK"}],
                            "source": {"kind": "user"}}),
    ("turn/start", {"turn": 1}),
    claim("next-turn", 1),
]


def write_repro(home: Path) -> Path:
    path = home / "sessions" / ROOT / "session.jsonl"
    header = {"type": "session", "version": 1, "id": ROOT, "createdAt": 1796108226511, "cwd": ".",
              "delegationDepth": 0}
    write_session_file(path, build_log(*REPRO, start_time=1796108226547), header=header)
    return path


async def load_inbox(home: Path, session_id: str) -> tuple[list[dict[str, Any]], Inbox]:
    """Load with repair in a fresh store (a new process), return the events and the rebuilt inbox."""
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.load(session_id)
    try:
        validate_log(session.events)
        return list(session.events), Inbox(session)
    finally:
        await store.close(session)


# -- item 1: claim and entry ------------------------------------------------------------------------
async def test_issue_repro_claim_without_entry_is_requeued_by_an_appended_splice(home):
    """The issue's log: repair appends a `requeued` re-insert and `turn/end interrupted`; the
    committed bytes stay a prefix of the repaired file, and ROOT_TASK is queued again."""
    path = write_repro(home)
    committed = path.read_bytes()

    events, inbox = await load_inbox(home, ROOT)

    assert path.read_bytes().startswith(committed)
    task = REPRO[0][1]["inserted"][0]
    assert [(e["type"], e["data"]) for e in events[3:]] == [
        ("agent/inbox/spliced", requeue("next-turn", task)),
        ("turn/end", {"turn": 1, "reason": {"kind": "interrupted"}}),
    ]
    assert texts(inbox.next_turn) == ["ROOT_TASK"] and inbox.next_step == []


class RecordingReplay(ReplayProvider):
    """The real replay provider, noting the messages of each request it serves."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.requests: list[ModelRequest] = []

    def stream(self, request: ModelRequest, signal: Any, on_retry: Any) -> Any:
        self.requests.append(request)
        return super().stream(request, signal, on_retry)


def user_texts_of(request: ModelRequest) -> list[str]:
    return [b["text"] for m in request.messages if m["role"] == "user" and m["source"]["kind"] == "user"
            for b in m["content"] if b["type"] == "text"]


def write_script(directory: Path, name: str, replies: list[str]) -> Path:
    """A one-agent transcript (JSON is YAML) whose root answers with `replies`, in order."""
    path = directory / f"{name}.yaml"
    path.write_text(json.dumps({"version": 1, "name": name, "task": "unused",
                                "agents": {"root": {"replies": [{"text": r} for r in replies]}}}))
    return path


async def resume(home: Path, tmp_path: Path, replies: list[str], *, root: str = ROOT) -> RecordingReplay:
    """`dsh run --resume ROOT FOLLOW_UP` in-process: `run_tree` is what the CLI calls."""
    script = load_transcript(write_script(tmp_path, "resume", replies))
    provider = RecordingReplay(script)
    result = await run_tree(RunRequest(home=home, task="FOLLOW_UP", transcript=script, provider=provider,
                                       resume=root))
    provider.finish_checks()
    assert provider.violations == [] and result.exit_code == 0, (provider.violations, result)
    return provider


async def test_issue_repro_resume_shows_root_task_to_the_model(home, tmp_path):
    """Issue 9 "done when": `--resume` of the repro log (driven through `run_tree`, the code path of
    `dsh run --resume`) shows ROOT_TASK to the model, ahead of the resume's own task."""
    write_repro(home)

    provider = await resume(home, tmp_path, ["DID_ROOT_TASK", "DID_FOLLOW_UP"])

    assert [user_texts_of(r) for r in provider.requests] == [["ROOT_TASK"], ["ROOT_TASK", "FOLLOW_UP"]]
    events = file_events(home / "sessions" / ROOT / "session.jsonl")
    entered = [e["data"]["id"] for e in events if e["type"] == "user/message"]
    assert entered.count(TASK_ID) == 1  # claimed again once, entered once


async def test_a_real_claim_window_left_by_a_kill_resumes_with_the_claimed_message(home, tmp_path):
    """The window itself, from a real run: a pre-step hook after the checkpoint copies the session
    directory (what a SIGKILL there leaves: the claim is durable, its step is not); resuming the copy
    shows the claimed task to the model."""
    crashed = tmp_path / "crashed"

    def at_the_window(agent: Agent) -> None:
        async def hook(ctx: PreStep) -> None:
            if (ctx.turn, ctx.step) == (1, 1) and not crashed.exists():
                shutil.copytree(home, crashed)

        agent.pre_step.add(hook)

    script = load_transcript(write_script(tmp_path, "first", ["FIRST_ANSWER"]))
    first = await run_tree(RunRequest(home=home, task="ROOT_TASK", transcript=script,
                                      provider=ReplayProvider(script), agent_hooks=[at_the_window]))
    assert first.exit_code == 0
    root_id = first.root_session_id
    kinds = [e["type"] for e in file_events(crashed / "sessions" / root_id / "session.jsonl")]
    assert kinds == ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced"]  # the issue's state

    provider = await resume(crashed, tmp_path, ["DID_ROOT_TASK", "DID_FOLLOW_UP"], root=root_id)
    assert user_texts_of(provider.requests[0]) == ["ROOT_TASK"]


async def test_a_next_step_batch_and_a_next_turn_item_return_to_their_fifo_positions(home):
    """Step 1 claims all of next-step and the first next-turn item; input queued after the claim
    stays behind them: next-step [S1, S2, S3], next-turn [A, B, C] again."""
    s1, s2, s3, a, b, c = (msg(t) for t in ("S1", "S2", "S3", "A", "B", "C"))
    log = build_log(
        insert("next-turn", 0, a), insert("next-turn", 1, b), insert("next-step", 0, s1), insert("next-step", 1, s2),
        ("turn/start", {"turn": 1}), claim("next-step", 2), claim("next-turn", 1),
        insert("next-step", 0, s3), insert("next-turn", 1, c),  # arrived after the claim
    )
    write_session_file(home / "sessions" / ROOT / "session.jsonl", log)

    events, inbox = await load_inbox(home, ROOT)

    assert [e["data"] for e in events[len(log):-1]] == [requeue("next-step", s1, s2), requeue("next-turn", a)]
    assert (texts(inbox.next_step), texts(inbox.next_turn)) == (["S1", "S2", "S3"], ["A", "B", "C"])


def stepped_turn_then(*tail: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn 1 entered A in step 1 (a tool call whose result staged S1, S2 into next-step); then `tail`."""
    a, s1, s2 = msg("A"), msg("S1"), msg("S2")
    return build_log(
        insert("next-turn", 0, a), ("turn/start", {"turn": 1}), claim("next-turn", 1),
        ("step/start", {"turn": 1, "step": 1}), ("user/message", a),
        ("assistant/message", assistant_with_calls(1, 1, "c1")),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
        ("tool/result", {"turn": 1, "step": 1, "callId": "c1",
                         "message": {"id": "r1", "role": "user", "source": {"kind": "tool", "callId": "c1"},
                                     "content": []}}),
        insert("next-step", 0, s1), insert("next-step", 1, s2), ("step/end", {"turn": 1, "step": 1}),
        claim("next-step", 2), *tail,
    )


@pytest.mark.parametrize(("tail", "requeued", "closers"), [
    pytest.param([], ["S1", "S2"], ["agent/inbox/spliced", "turn/end"], id="step-2-claim-not-entered"),
    pytest.param([("step/start", {"turn": 1, "step": 2}), ("user/message", msg("S1"))], ["S2"],
                 ["step/end", "agent/inbox/spliced", "turn/end"], id="step-2-entry-torn-after-S1"),
    pytest.param([("step/start", {"turn": 1, "step": 2}), ("user/message", msg("S1")), ("user/message", msg("S2"))],
                 [], ["step/end", "turn/end"], id="step-2-entered"),
])
async def test_a_step_2_claim_is_requeued_only_for_what_no_step_entered(home, tail, requeued, closers):
    """Claims of next-step at step 2+: a message entered (A in step 1, S1 in a torn step 2) stays in
    the log and is never queued twice; only the unentered rest returns, in claim order."""
    log = stepped_turn_then(*tail)
    write_session_file(home / "sessions" / ROOT / "session.jsonl", log)

    events, inbox = await load_inbox(home, ROOT)

    assert [e["type"] for e in events[len(log):]] == closers
    assert texts(inbox.next_step) == requeued and inbox.next_turn == []
    entered = [e["data"]["content"][0]["text"] for e in events if e["type"] == "user/message"]
    assert not set(entered) & set(requeued)


async def test_a_second_load_requeues_nothing_again(home):
    """The repaired turn is closed: a later crash and load leave the inbox as the first load did."""
    write_repro(home)
    first, _ = await load_inbox(home, ROOT)

    second, inbox = await load_inbox(home, ROOT)

    assert second == first and texts(inbox.next_turn) == ["ROOT_TASK"]


@pytest.mark.parametrize("reason", [
    pytest.param({"kind": "error", "error": {"code": "CHECKPOINT_FAILED", "message": "disk full"}},
                 id="pre-step-checkpoint-failed"),
    pytest.param({"kind": "aborted", "reason": {"kind": "user"}}, id="aborted-in-pre-step"),
    pytest.param({"kind": "blocked"}, id="rejected"),
])
async def test_a_claim_of_a_turn_that_ended_stays_consumed(home, reason):
    """A durable `turn/end` makes the claim a live outcome (§5.5, §6.11), not a crash: when a later
    turn is the crash-open one, only that turn's claim (B) is re-queued, never ROOT_TASK."""
    b = msg("B")
    log = build_log(*REPRO, ("turn/end", {"turn": 1, "reason": reason}),
                    insert("next-turn", 0, b), ("turn/start", {"turn": 2}), claim("next-turn", 1))
    write_session_file(home / "sessions" / ROOT / "session.jsonl", log)

    events, inbox = await load_inbox(home, ROOT)

    assert [e["data"] for e in events[len(log):]] == [
        requeue("next-turn", b), {"turn": 2, "reason": {"kind": "interrupted"}},
    ]
    assert texts(inbox.next_turn) == ["B"]


class FailFirstWrite(FileIO):
    def __init__(self) -> None:
        self.writes = 0

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        self.writes += 1
        if self.writes == 1:
            raise OSError("simulated write failure at the pre-step checkpoint")
        super().write(path, data, fsync)


async def test_a_live_pre_step_checkpoint_failure_still_consumes_the_claim(make_runtime, home):
    """§5.5 unchanged: the failed barrier ends the turn `error` and the claimed input is consumed;
    once the final flush lands, a load finds it neither queued nor re-queued."""
    rt = await make_runtime([], batch_delay_ms=5000, io=FailFirstWrite())
    agent = await rt.new_agent()
    agent.followup(user_message("first"))
    await agent.when_idle()
    await rt.store.close(agent.session)
    rt.forget(agent)

    events, inbox = await load_inbox(home, agent.id)

    reason = next(e["data"]["reason"] for e in events if e["type"] == "turn/end")
    assert reason["error"]["code"] == "CHECKPOINT_FAILED"
    assert inbox.next_turn == [] and not any(e["data"].get("outcome") == REQUEUED for e in events)


@pytest.mark.parametrize("torn_step", [False, True], ids=["no-step", "torn-step-start"])
async def test_the_fold_counts_a_requeued_claim_for_nothing(home, torn_step):
    """A repaired turn that claimed but entered nothing (no step, or a `step/start` torn before its
    `user/message`) does not account: the message is queued, not consumed, so the epoch reads
    `completed`, not `aborted`. A turn that entered a message still accounts."""
    tail = [("step/start", {"turn": 1, "step": 1})] if torn_step else []
    write_session_file(home / "sessions" / ROOT / "session.jsonl", build_log(*REPRO, *tail))
    events, inbox = await load_inbox(home, ROOT)
    fold = fold_consumed_work(events)
    assert (fold.to_json(), epoch_stop_reason(fold)) == ({"dropped_unrun": False}, "completed")
    assert texts(inbox.next_turn) == ["ROOT_TASK"]

    write_session_file(home / "sessions" / ROOT / "session.jsonl", stepped_turn_then())
    events, _ = await load_inbox(home, ROOT)
    fold = fold_consumed_work(events)
    assert (fold.end_kind, epoch_stop_reason(fold)) == ("interrupted", "aborted")


@pytest.mark.parametrize(("splice", "lists"), [
    pytest.param({"target": "next-turn", "start": 0, "inserted": [msg("B")], "outcome": REQUEUED},
                 (["B", "A"], []), id="requeue-at-the-head"),
    pytest.param({"target": "next-turn", "start": 0, "inserted": [msg("B")]}, None, id="plain-insert-at-the-head"),
    pytest.param({"target": "next-step", "start": 1, "inserted": [msg("B")], "outcome": REQUEUED}, None,
                 id="requeue-past-the-end"),
    pytest.param({"target": "next-turn", "start": 0, "inserted": [], "removedCount": 2}, None, id="claim-too-many"),
])
def test_only_a_repair_requeue_may_insert_ahead_of_queued_messages(splice, lists):
    """One replay serves repair and the inbox rebuild (§6.5): anything else invalid is SESSION_CORRUPT."""
    events = build_log(insert("next-turn", 0, msg("A")), ("agent/inbox/spliced", splice))
    if lists is None:
        for rebuild in (replay_inbox, lambda evs: Inbox(Session(make_header(ROOT), evs))):
            with pytest.raises(SessionError) as info:
                rebuild(events)
            assert (info.value.code, info.value.message) == ("SESSION_CORRUPT", "invalid inbox splice at seq 1")
    else:
        inbox = Inbox(Session(make_header(ROOT), events))
        assert (texts(inbox.next_turn), texts(inbox.next_step)) == lists


def test_closers_of_a_claim_with_no_open_turn_or_no_claim_requeue_nothing():
    """Only the crash-open turn's claims are re-queued; an insert alone leaves nothing to close."""
    assert interrupted_turn_closers(build_log(REPRO[0])) == []
    closers = interrupted_turn_closers(build_log(*REPRO[:2]))
    assert [e["type"] for e in closers] == ["turn/end"]


# -- item 2: atomic creation ------------------------------------------------------------------------
class StepIO(FileIO):
    """At each `create_step`, copy the home (the state a kill there leaves) or raise at one step."""

    def __init__(self, home: Path, shots: Path, fail_at: CreateStep | None = None) -> None:
        self.home, self.shots, self.fail_at = home, shots, fail_at
        self.steps: list[CreateStep] = []

    def create_step(self, step: CreateStep, directory: Path) -> None:
        self.steps.append(step)
        if step == self.fail_at:
            raise OSError(f"injected failure before {step}")
        shot = self.shots / f"{len(self.steps):02d}-{step}"
        if self.home.exists():
            shutil.copytree(self.home, shot, symlinks=True)
        else:
            shot.mkdir(parents=True)


def outcome_of(home: Path, session_id: str) -> str:
    """What a reader sees: `absent`, `unmaterialized` or `complete` (anything else fails)."""
    session_dir = home / "sessions" / session_id
    if not session_dir.exists():
        return "absent"
    try:
        result = read(session_dir / "session.jsonl")
    except SessionError as exc:
        assert exc.code == "SESSION_UNMATERIALIZED", exc
        assert is_unmaterialized(session_dir)
        return "unmaterialized"
    assert (result.header, result.events, result.issue) == (make_header(session_id, created_at=7), [], None)
    return "complete"


async def test_a_kill_at_each_step_of_create_leaves_a_complete_session_or_an_unmaterialized_dir(tmp_path):
    home, shots = tmp_path / "home", tmp_path / "shots"
    io = StepIO(home, shots)
    store = SessionStore(home, batch_delay_ms=0, fsync=True, io=io)

    session = await store.create(make_header("session-c", created_at=7))
    await store.close(session)

    assert io.steps == ["mkdir", "mkdir", "mkdir", *CREATE_STEPS[1:]]  # home, sessions/, sessions/<id>/
    seen = {shot.name: outcome_of(shot, "session-c") for shot in sorted(shots.iterdir())}
    assert seen == {
        "01-mkdir": "absent", "02-mkdir": "absent", "03-mkdir": "absent",
        "04-open-temp": "unmaterialized", "05-write-header": "unmaterialized",
        "06-fsync-temp": "unmaterialized", "07-link": "unmaterialized",
        "08-unlink-temp": "complete", "09-fsync-dir": "complete",
    }
    assert outcome_of(home, "session-c") == "complete"
    assert sorted(p.name for p in (home / "sessions" / "session-c").iterdir()) == ["session.jsonl"]
    for shot in shots.iterdir():  # every killed state loads or is pruned, never corrupt
        pruned = {o.session_id for o in prune_unmaterialized(shot / "sessions") if o.action == "removed"}
        assert ("session-c" in pruned) == (seen[shot.name] == "unmaterialized")


@pytest.mark.parametrize("step", CREATE_STEPS)
async def test_a_failure_at_each_step_of_create_leaves_no_session_and_a_retry_succeeds(tmp_path, step):
    """A live failure cleans up after itself: no temp file, no `session.jsonl`, no live session; the
    same id can be created afterwards (a never-materialized directory blocks nothing)."""
    home = tmp_path / "home"
    store = SessionStore(home, batch_delay_ms=0, fsync=True, io=StepIO(home, tmp_path / "shots", fail_at=step))

    with pytest.raises(OSError, match=f"before {step}"):
        await store.create(make_header("session-c", created_at=7))

    assert outcome_of(home, "session-c") in ("absent", "unmaterialized") and not store.is_live("session-c")
    assert list(home.glob(f"sessions/*/{TEMP_PREFIX}*")) == []
    retry = SessionStore(home, batch_delay_ms=0, fsync=True)
    session = await retry.create(make_header("session-c", created_at=7))
    await retry.close(session)
    assert outcome_of(home, "session-c") == "complete"


async def test_a_real_collision_is_still_session_exists_and_leaves_the_first_file(store_home):
    store, home = store_home
    first = await store.create(make_header("session-c", created_at=7))
    await store.close(first)
    before = store.path("session-c").read_bytes()

    with pytest.raises(SessionError) as info:
        await SessionStore(home, fsync=False).create(make_header("session-c", created_at=8))

    assert info.value.code == "SESSION_EXISTS"
    assert store.path("session-c").read_bytes() == before
    assert sorted(p.name for p in store.path("session-c").parent.iterdir()) == ["session.jsonl"]


async def test_the_lock_is_held_on_the_final_file_before_create_returns(store_home):
    """Published and locked: another run's load of the new session is SESSION_BUSY."""
    store, home = store_home
    session = await store.create(make_header("session-c", created_at=7))
    try:
        with pytest.raises(SessionError) as info:
            await SessionStore(home, fsync=False).load("session-c")
        assert info.value.code == "SESSION_BUSY"
    finally:
        await store.close(session)


@pytest.fixture
def store_home(tmp_path: Path) -> tuple[SessionStore, Path]:
    home = tmp_path / "home"
    return SessionStore(home, batch_delay_ms=0, fsync=False), home


def make_state(home: Path, state: str) -> Path:
    session_dir = home / "sessions" / "session-c"
    session_dir.mkdir(parents=True)
    header = line(make_header("session-c", created_at=7))
    if state == "temp-complete":
        (session_dir / f"{TEMP_PREFIX}abc").write_bytes(header)
    elif state == "temp-partial":
        (session_dir / f"{TEMP_PREFIX}abc").write_bytes(header[:9])
    elif state == "empty-session-file":
        (session_dir / "session.jsonl").write_bytes(b"")
    elif state == "after-header":
        (session_dir / "session.jsonl").write_bytes(header)
        (session_dir / f"{TEMP_PREFIX}abc").write_bytes(header)  # killed before unlink-temp
    return session_dir


@pytest.mark.parametrize("state", ["dir-only", "temp-complete", "temp-partial", "empty-session-file"])
async def test_a_directory_left_before_the_header_reads_as_unmaterialized_not_corrupt(tmp_path, state):
    """Hand-made: between mkdir and header; a temp file not renamed; an old version's empty file."""
    home = tmp_path / "home"
    make_state(home, state)

    assert outcome_of(home, "session-c") == "unmaterialized"
    with pytest.raises(SessionError) as info:
        await SessionStore(home, fsync=False).load("session-c")
    assert info.value.code == "SESSION_UNMATERIALIZED"


async def test_a_directory_left_after_the_header_is_a_complete_session(tmp_path):
    home = tmp_path / "home"
    make_state(home, "after-header")
    store = SessionStore(home, batch_delay_ms=0, fsync=False)

    session = await store.load("session-c")
    await store.close(session)

    assert outcome_of(home, "session-c") == "complete"
    assert prune_unmaterialized(home / "sessions") == []


# -- a child whose creation a crash cut short -------------------------------------------------------
async def test_a_cold_resume_of_an_unmaterialized_child_is_not_resumable(make_tree, home):
    """As before atomic creation: NOT_RESUMABLE T-ERR-NOT-FOUND, and the directory is left as is."""
    tree = await make_tree({"root": {"replies": []}})
    root = await tree.create_root()
    child_id = new_child_id()
    left = make_state(home, "temp-complete").rename(home / "sessions" / child_id)

    with pytest.raises(SubagentError) as caught:
        await tree.manager.followup(root, child_id, "more", {"kind": "user"}, AbortController().signal)

    assert (caught.value.code, caught.value.message) == ("NOT_RESUMABLE", render("T-ERR-NOT-FOUND", id=child_id))
    assert is_unmaterialized(left) and [p.name for p in left.iterdir()] == [f"{TEMP_PREFIX}abc"]


async def test_the_parents_repaired_subagent_call_keeps_tool_outcome_unknown(home):
    """The parent crashed inside its `subagent` call while the child's creation was cut short: the
    started call is repaired TOOL_OUTCOME_UNKNOWN (the child may exist), the entered prompt is not
    re-queued, and the child's directory reads as never materialized."""
    task = msg("SPAWN_ONE")
    log = build_log(
        insert("next-turn", 0, task), ("turn/start", {"turn": 1}), claim("next-turn", 1),
        ("step/start", {"turn": 1, "step": 1}), ("user/message", task),
        ("assistant/message", assistant_with_calls(1, 1, "sa1")),
        ("tool/call", {"turn": 1, "step": 1, "callId": "sa1", "name": "subagent",
                       "arguments": '{"label":"x","prompt":"y"}'}),
    )
    write_session_file(home / "sessions" / ROOT / "session.jsonl", log)
    child_dir = make_state(home, "dir-only").rename(home / "sessions" / new_child_id())

    events, inbox = await load_inbox(home, ROOT)

    closers = events[len(log):]
    assert [e["type"] for e in closers] == ["tool/result", "step/end", "turn/end"]
    assert closers[0]["data"]["error"] == {"code": "TOOL_OUTCOME_UNKNOWN", "message": render("T-REPAIR-UNKNOWN")}
    assert inbox.next_turn == [] and outcome_of(home, child_dir.name) == "unmaterialized"
