"""Read-only parsing and crash repair (SPEC §5.6).

`read` never writes; it finds the good prefix and, for a bad tail, offers `truncateTo`. Damage
followed by a committed `turn/end` is corruption, never repaired. `interrupted_turn_closers` closes a
turn a crash left open, continuing the seqs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dsh.loader.errors import SessionError
from dsh.loader.session import interrupted_turn_closers, make_header, read, validate_log
from dsh.loader.texts import render

from .helpers import assistant_with_calls, build_log, line, write_session_file

T1 = ("turn/start", {"turn": 1})
S1 = ("step/start", {"turn": 1, "step": 1})
E1 = ("step/end", {"turn": 1, "step": 1})
END1 = ("turn/end", {"turn": 1, "reason": {"kind": "completed"}})


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "sessions" / "session-r" / "session.jsonl"


def test_read_of_a_clean_file_has_no_issue(path: Path) -> None:
    events = build_log(T1, S1, E1, END1)
    write_session_file(path, events)
    result = read(path)
    assert result.header == make_header("session-r", created_at=1)
    assert result.events == events
    assert result.issue is None


def test_read_of_a_missing_file_is_session_not_found(path: Path) -> None:
    with pytest.raises(SessionError) as info:
        read(path)
    assert info.value.code == "SESSION_NOT_FOUND"


@pytest.mark.parametrize("raw", [
    pytest.param(b"not json\n", id="unparsable"),
    pytest.param(b"[1]\n", id="not-an-object"),
    pytest.param(line({"type": "session", "version": 1, "createdAt": 1, "delegationDepth": 0}), id="no-id"),
    pytest.param(line({**make_header("session-r", created_at=1), "type": "event"}), id="wrong-type"),
    pytest.param(line(make_header("session-r", created_at=1))[:-1], id="unterminated"),
    pytest.param(line({**make_header("session-r", created_at=1), "origin": "fork"}), id="bad-origin"),
])
def test_missing_or_malformed_header_is_session_corrupt(path: Path, raw: bytes) -> None:
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with pytest.raises(SessionError) as info:
        read(path)
    assert info.value.code == "SESSION_CORRUPT"


@pytest.mark.parametrize("header", [
    pytest.param({**make_header("session-r", created_at=1), "version": 2}, id="m30-version-2"),
    pytest.param({"type": "session", "version": 2, "shape": "unknown to v1"},
                 id="m30-version-2-before-other-checks"),
])
def test_newer_format_header_is_refused_before_other_checks(path: Path, header: dict[str, Any]) -> None:
    """Matrix 30: a header with `version: 2` is NEWER_FORMAT, whatever else it holds."""
    write_session_file(path, build_log(T1), header=header, tail=b"garbage")
    with pytest.raises(SessionError) as info:
        read(path)
    assert info.value.code == "NEWER_FORMAT"


def _bad_tails() -> list[Any]:
    nxt = {"type": "step/end", "seq": 2, "time": 3, "data": {"turn": 1, "step": 1}}
    return [
        pytest.param(line(nxt)[:-7], id="m25-torn-no-newline"),
        pytest.param(line(nxt)[:-1], id="m25-complete-json-without-newline"),
        pytest.param(b"{\"type\":\"step/e\n", id="unparsable"),
        pytest.param(b"\n", id="blank-line"),
        pytest.param(line({**nxt, "extra": 1}), id="envelope-extra-key"),
        pytest.param(line({**nxt, "seq": 3}), id="seq-gap"),
        pytest.param(line({**nxt, "seq": 1}), id="seq-duplicate"),
        pytest.param(line(nxt).replace(b'"time":3', b'"time":NaN'), id="nan"),
        pytest.param(b"\xff\xfe\n", id="invalid-utf8"),
        pytest.param(b"{torn\n" + line({**nxt, "seq": 3}), id="two-bad-lines-no-turn-end"),
    ]


@pytest.mark.parametrize("tail", _bad_tails())
def test_bad_tail_ends_the_good_prefix_and_is_offered_for_truncation(path: Path, tail: bytes) -> None:
    """Matrix 25: the first bad line ends the prefix; `read` reports where to cut and writes nothing."""
    events = build_log(T1, S1)
    raw = write_session_file(path, events, tail=tail)
    result = read(path)
    assert result.events == events
    assert result.issue == {"truncateTo": len(raw) - len(tail)}
    assert path.read_bytes() == raw


def test_damage_followed_by_a_committed_turn_end_is_session_corrupt(path: Path) -> None:
    """Matrix 26: a corrupt line followed by `turn/end` is damage in committed history."""
    events = build_log(T1, S1, E1, END1)
    raw = line(make_header("session-r", created_at=1)) + line(events[0]) + b"{corrupt\n"
    raw += b"".join(line(e) for e in events[2:])
    path.parent.mkdir(parents=True)
    path.write_bytes(raw)
    with pytest.raises(SessionError) as info:
        read(path)
    assert info.value.code == "SESSION_CORRUPT"
    assert path.read_bytes() == raw


def test_same_damage_after_the_last_turn_end_is_a_truncatable_tail(path: Path) -> None:
    """Matrix 26: the same corrupt line after the last `turn/end` leaves a truncated prefix."""
    events = build_log(T1, S1, E1, END1)
    later = {"type": "turn/start", "seq": 5, "time": 9, "data": {"turn": 2}}
    raw = write_session_file(path, events, tail=b"{corrupt\n" + line(later))
    result = read(path)
    assert result.events == events
    assert result.issue == {"truncateTo": len(raw) - len(b"{corrupt\n" + line(later))}


def test_closed_turn_needs_no_closers() -> None:
    assert interrupted_turn_closers(build_log(T1, S1, E1, END1)) == []
    assert interrupted_turn_closers([]) == []


def _repair_message(call_id: str, seq: int, text: str) -> dict[str, Any]:
    return {
        "id": f"repair-{call_id}-{seq}",
        "role": "user",
        "source": {"kind": "tool", "callId": call_id},
        "content": [{"type": "tool-result", "toolCallId": call_id, "isError": True,
                     "content": [{"type": "text", "text": text}]}],
    }


def test_open_step_with_recorded_and_unrecorded_calls_gets_both_repair_results() -> None:
    """Matrix 24: a tool-call with no `tool/call` → TOOL_NOT_STARTED; with one → TOOL_OUTCOME_UNKNOWN."""
    events = build_log(
        T1, S1,
        ("assistant/message", assistant_with_calls(1, 1, "c1", "c2", "c3")),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c3", "name": "echo", "arguments": "{}"}),
        ("tool/result", {"turn": 1, "step": 1, "callId": "c3", "message": {}}),
        start_time=100,
    )
    closers = interrupted_turn_closers(events)
    unknown, not_started = render("T-REPAIR-UNKNOWN"), render("T-REPAIR-NOT-STARTED")
    assert closers == [
        {"type": "tool/result", "seq": 6, "time": 105, "data": {
            "turn": 1, "step": 1, "callId": "c1", "message": _repair_message("c1", 6, unknown),
            "error": {"code": "TOOL_OUTCOME_UNKNOWN", "message": unknown}}},
        {"type": "tool/result", "seq": 7, "time": 105, "data": {
            "turn": 1, "step": 1, "callId": "c2", "message": _repair_message("c2", 7, not_started),
            "error": {"code": "TOOL_NOT_STARTED", "message": not_started}}},
        {"type": "step/end", "seq": 8, "time": 105, "data": {"turn": 1, "step": 1}},
        {"type": "turn/end", "seq": 9, "time": 105, "data": {"turn": 1, "reason": {"kind": "interrupted"}}},
    ]
    validate_log(events + closers)


def test_turn_open_between_steps_gets_only_turn_end() -> None:
    events = build_log(
        T1, S1, ("assistant/message", assistant_with_calls(1, 1, "c1")), E1,
        ("llm/x", {}, {"ignorable": True}),
    )
    closers = interrupted_turn_closers(events)
    assert [(c["type"], c["seq"], c["data"]) for c in closers] == [
        ("turn/end", 5, {"turn": 1, "reason": {"kind": "interrupted"}}),
    ]
    validate_log(events + closers)


def test_only_the_latest_turn_is_closed() -> None:
    events = build_log(
        T1, S1, ("assistant/message", assistant_with_calls(1, 1, "old")), E1, END1,
        ("turn/start", {"turn": 2}), ("step/start", {"turn": 2, "step": 1}),
    )
    closers = interrupted_turn_closers(events)
    assert [(c["type"], c["data"].get("step")) for c in closers] == [("step/end", 1), ("turn/end", None)]
    assert closers[-1]["data"]["turn"] == 2
    validate_log(events + closers)
