"""Replay on resume (issue 9 item 5): a resumed tree is served the replies its crashed run had not
consumed, read back from each session's log (`replies_served`), with bindings rebuilt as at creation."""

from __future__ import annotations

import json
from pathlib import Path

from dsh.loader.models import ReplayProvider
from dsh.loader.models.replay import replies_served
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
    """`engine/hang-reached` (the Temporal turn activity's note, loader/engines/hang_note.py): a
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
