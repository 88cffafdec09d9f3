"""Replay on resume (issue 9 item 5): a resumed tree is served the replies its crashed run had not
consumed, read back from each session's log (`replies_served`), with bindings rebuilt as at creation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from dsh.loader.hang_note import HANG_REACHED_EVENT
from dsh.loader.headless import RunRequest, RunSinks, run_tree
from dsh.loader.models import ReplayProvider
from dsh.loader.models.replay import replies_served
from dsh.loader.session import SessionStore
from dsh.loader.transcripts import load_transcript


def _ev(type_: str, **data: object) -> dict:
    return {"type": type_, "seq": 0, "time": 0, "data": data}


def test_replies_served_counts_answers_and_provider_errors_not_checkpoint_failures() -> None:
    events = [
        _ev("turn/start", turn=1), _ev("step/start", turn=1, step=1),
        _ev("assistant/message", turn=1, step=1, message={"content": []}), _ev("step/end", turn=1, step=1),
        _ev("turn/end", turn=1, reason={"kind": "completed"}),
        # an `error` reply: the step has no answer and the turn ends with the provider's code
        _ev("turn/start", turn=2), _ev("step/start", turn=2, step=1), _ev("step/end", turn=2, step=1),
        _ev("turn/end", turn=2, reason={"kind": "error", "error": {"code": "RATE_LIMITED", "message": "x"}}),
        # the model-request checkpoint failed: the provider was never called
        _ev("turn/start", turn=3), _ev("step/start", turn=3, step=1), _ev("step/end", turn=3, step=1),
        _ev("turn/end", turn=3, reason={"kind": "error", "error": {"code": "CHECKPOINT_FAILED", "message": "x"}}),
        # served, but the crash swallowed the answer: served again on resume
        _ev("turn/start", turn=4), _ev("step/start", turn=4, step=1),
    ]
    assert replies_served(events) == 2


def test_resume_session_rebinds_order_scripts_in_creation_order_and_continues_each_cursor(tmp_path: Path) -> None:
    doc = {"version": 1, "name": "r", "task": "go", "agents": {
        "root": {"replies": [{"text": "R1"}, {"text": "R2"}]},
        "a": {"order": 1, "replies": [{"text": "A1"}, {"text": "A2"}]},
        "b": {"order": 2, "replies": [{"text": "B1"}]},
    }}
    path = tmp_path / "r.yaml"
    path.write_text(json.dumps(doc))
    replay = ReplayProvider(load_transcript(str(path)))
    answered = [_ev("assistant/message", turn=1, step=1, message={"content": []})]

    replay.resume_session("session-root", None, answered)
    replay.resume_session("child-1", {"mode": "continuable", "label": "x"}, answered)
    replay.resume_session("child-2", {"mode": "continuable", "label": "y"}, answered * 3)
    replay.resume_session("child-1", {"mode": "continuable", "label": "x"}, [])  # once per process

    assert [replay.agent_key_of(s) for s in ("session-root", "child-1", "child-2")] == ["root", "a", "b"]
    assert replay.finish_checks() == [
        {"code": "REPLAY_UNCONSUMED", "agent": "root", "message": "agent root consumed 1/2 replies"},
        {"code": "REPLAY_UNCONSUMED", "agent": "a", "message": "agent a consumed 1/2 replies"},
    ]  # b's cursor is clamped to its script: 1/1, nothing unconsumed


def test_replies_served_counts_a_reached_prefixless_hang_only_once_it_was_aborted() -> None:
    """`engine/hang-reached` (both engines' note, loader/hang_note.py): a
    prefix-less hang leaves no answer; reached and then aborted it was served, cut off by a crash
    (its turn closed `interrupted`) it is served again, and a step with an answer counts once."""
    hung = [_ev("turn/start", turn=1), _ev("step/start", turn=1, step=1), _ev("engine/hang-reached", turn=1, step=1)]
    aborted = [*hung, _ev("step/end", turn=1, step=1),
               _ev("turn/end", turn=1, reason={"kind": "aborted", "reason": {"kind": "user"}})]
    crashed = [*hung, _ev("step/end", turn=1, step=1), _ev("turn/end", turn=1, reason={"kind": "interrupted"})]
    answered = [*hung, _ev("assistant/message", turn=1, step=1, message={"content": []}, interrupted=True),
                _ev("step/end", turn=1, step=1), _ev("turn/end", turn=1, reason={"kind": "aborted"})]
    unnoted = [_ev("turn/start", turn=1), _ev("step/start", turn=1, step=1), _ev("step/end", turn=1, step=1),
               _ev("turn/end", turn=1, reason={"kind": "aborted", "reason": {"kind": "user"}})]
    assert [replies_served(log) for log in (aborted, crashed, answered, unnoted)] == [1, 0, 1, 0]


async def test_a_resume_after_a_stop_in_a_prefixless_hang_serves_the_next_reply(tmp_path: Path) -> None:
    """`dsh run --resume` of a root stopped (SIGINT) while its script hung without a prefix: the
    stopped run noted the hang (loader/hang_note.py), so the resumed turn is served AFTER, not the
    same hang again (it hung until its time limit before). The `--json` stream carries the note."""
    path = tmp_path / "hang.yaml"
    path.write_text(json.dumps({"version": 1, "name": "hang", "task": "go",
                                "agents": {"root": {"replies": [{"hang": {}}, {"text": "AFTER"}]}}}))
    stop = asyncio.Event()
    first = ReplayProvider(load_transcript(path))
    first.add_hang_listener(lambda key: stop.set())  # the CLI sets it on the first SIGINT
    streamed: list[dict[str, Any]] = []
    stopped = await run_tree(RunRequest(home=tmp_path / "home", transcript=first.transcript, provider=first,
                                        stop=stop, sinks=RunSinks(on_event=lambda sid, e: streamed.append(e))))
    assert (stopped.stop_reason, stopped.interrupted) == ("aborted", True)
    logged = [e["type"] for e in SessionStore(tmp_path / "home").read(stopped.root_session_id).events]
    assert HANG_REACHED_EVENT in logged and [e["type"] for e in streamed] == logged  # the stream is the log
    resumed = await asyncio.wait_for(run_tree(RunRequest(
        home=tmp_path / "home", task="again", transcript=load_transcript(path),
        resume=stopped.root_session_id, timeout=20)), 30)
    assert (resumed.stop_reason, resumed.output, resumed.timed_out, resumed.violations) == (
        "completed", "AFTER", False, [])

