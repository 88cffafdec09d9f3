"""Envelope and relational invariants of the session log (SPEC §5.1, §5.2).

`validate_log` runs in every test teardown and on every load, so it must accept every log the
runtime writes (including one whose last turn is still open) and name the first violation by seq.
"""

from __future__ import annotations

from typing import Any

import pytest

from dsh.loader.errors import SessionError
from dsh.loader.session import EVENT_TYPES, make_header, validate_log

from .helpers import assistant_with_calls, build_log

USER = {"id": "u1", "role": "user", "content": [{"type": "text", "text": "hi"}], "source": {"kind": "user"}}
DONE = {"kind": "completed"}


def well_formed() -> list[dict[str, Any]]:
    return build_log(
        ("subagent/descriptor", {"version": 1, "mode": "continuable", "provider": "spawn", "label": "w"}),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [USER]}),
        ("turn/start", {"turn": 1}),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [], "removedCount": 1}),
        ("step/start", {"turn": 1, "step": 1}),
        ("user/message", USER),
        ("llm/retry", {"turn": 1, "step": 1, "attempt": 1, "delayMs": 10, "code": "RATE_LIMITED"}),
        ("assistant/message", assistant_with_calls(1, 1, "c1", "c2")),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"}),
        ("tool/result", {"turn": 1, "step": 1, "callId": "c1", "message": {}}),
        ("tool/result", {"turn": 1, "step": 1, "callId": "c2", "message": {},
                         "error": {"code": "TOOL_NOT_STARTED", "message": "x"}}),
        ("future/thing", {"any": 1}, {"ignorable": True}),
        ("step/end", {"turn": 1, "step": 1}),
        ("step/start", {"turn": 1, "step": 2}),
        ("assistant/message", {"turn": 1, "step": 2, "message": {"content": []}, "finish": "stop"}),
        ("step/end", {"turn": 1, "step": 2}),
        ("turn/end", {"turn": 1, "reason": DONE}),
        ("turn/start", {"turn": 2}),
        ("step/start", {"turn": 2, "step": 1}),
    )


def test_well_formed_log_with_open_turn_is_accepted() -> None:
    validate_log(well_formed())


def test_empty_log_is_accepted() -> None:
    validate_log([])


def test_event_types_are_the_section_5_2_vocabulary() -> None:
    assert EVENT_TYPES == {
        "turn/start", "turn/end", "step/start", "step/end", "user/message", "assistant/message",
        "tool/call", "tool/result", "agent/inbox/spliced", "subagent/descriptor", "llm/retry",
    }


T1 = ("turn/start", {"turn": 1})
S1 = ("step/start", {"turn": 1, "step": 1})
E1 = ("step/end", {"turn": 1, "step": 1})
CALL = ("tool/call", {"turn": 1, "step": 1, "callId": "c1", "name": "echo", "arguments": "{}"})
RESULT = ("tool/result", {"turn": 1, "step": 1, "callId": "c1", "message": {}})

RELATIONAL = [
    pytest.param([("turn/start", {"turn": 2})], 0, "is not turn 1", id="turns-start-at-1"),
    pytest.param([T1, ("turn/end", {"turn": 1, "reason": DONE}), ("turn/start", {"turn": 3})], 2,
                 "is not turn 2", id="turns-increase-by-1"),
    pytest.param([T1, ("turn/start", {"turn": 2})], 1, "while turn 1 is open", id="one-open-turn"),
    pytest.param([T1, ("step/start", {"turn": 1, "step": 2})], 1, "is not step 1", id="steps-start-at-1"),
    pytest.param([T1, S1, E1, ("step/start", {"turn": 1, "step": 3})], 3, "is not step 2",
                 id="steps-contiguous"),
    pytest.param([("step/start", {"turn": 1, "step": 1})], 0, "without an open turn", id="step-needs-turn"),
    pytest.param([T1, S1, ("step/start", {"turn": 1, "step": 2})], 2, "while step 1 is open",
                 id="step-needs-no-open-step"),
    pytest.param([T1, ("step/start", {"turn": 2, "step": 1})], 1, "is not the open turn",
                 id="step-names-open-turn"),
    pytest.param([T1, E1], 1, "without an open step", id="step-end-needs-step"),
    pytest.param([T1, S1, ("step/end", {"turn": 1, "step": 2})], 2, "does not name the open step",
                 id="step-end-names-step"),
    pytest.param([T1, ("assistant/message", assistant_with_calls(1, 1))], 1, "outside a step",
                 id="assistant-outside-step"),
    pytest.param([T1, S1, ("assistant/message", assistant_with_calls(1, 2))], 2,
                 "does not name the open step", id="assistant-wrong-step"),
    pytest.param([T1, S1, ("tool/call", {"turn": 2, "step": 1, "callId": "c1"})], 2,
                 "does not name the open step", id="tool-call-wrong-turn"),
    pytest.param([T1, ("llm/retry", {"turn": 1, "step": 1, "attempt": 1})], 1, "outside a step",
                 id="retry-outside-step"),
    pytest.param([("user/message", USER)], 0, "user/message outside a step", id="user-outside-step"),
    pytest.param([T1, ("user/message", USER)], 1, "user/message outside a step", id="user-between-steps"),
    pytest.param([T1, S1, RESULT], 2, "without a tool/call", id="result-needs-call"),
    pytest.param([T1, S1, CALL, E1, ("step/start", {"turn": 1, "step": 2}),
                  ("tool/result", {"turn": 1, "step": 2, "callId": "c1", "message": {},
                                   "error": {"code": "TOOL_OUTCOME_UNKNOWN", "message": "x"}})],
                 5, "without a tool/call", id="result-call-in-earlier-step"),
    pytest.param([T1, S1, CALL, ("tool/result", {"turn": 1, "step": 1, "callId": "c2", "message": {}})],
                 3, "without a tool/call", id="result-other-call-id"),
    pytest.param([("turn/end", {"turn": 1, "reason": DONE})], 0, "without an open turn",
                 id="turn-end-needs-turn"),
    pytest.param([T1, ("turn/end", {"turn": 2, "reason": DONE})], 1, "does not match open turn",
                 id="turn-end-matches-turn"),
    pytest.param([T1, S1, ("turn/end", {"turn": 1, "reason": DONE})], 2, "while step 1 is open",
                 id="turn-end-no-open-step"),
    pytest.param([T1, ("turn/end", {"turn": 1, "reason": {"kind": "finished"}})], 1, "reason kind",
                 id="turn-end-reason-kind"),
    pytest.param([T1, ("turn/end", {"turn": 1})], 1, "reason kind", id="turn-end-needs-reason"),
    pytest.param([("session/fork", {})], 0, "unknown event type session/fork", id="unknown-type"),
]


@pytest.mark.parametrize(("items", "seq", "what"), RELATIONAL)
def test_relational_violation_is_named_with_its_seq(
    items: list[tuple[Any, ...]], seq: int, what: str
) -> None:
    with pytest.raises(SessionError) as info:
        validate_log(build_log(*items))
    assert info.value.code == "INVALID_LOG"
    assert what in info.value.message
    assert info.value.message.endswith(f"at seq {seq}")


_DELETE = object()


def _mutated(index: int, **changes: Any) -> list[dict[str, Any]]:
    events = build_log(T1, S1, E1)
    for key, value in changes.items():
        if value is _DELETE:
            del events[index][key]
        else:
            events[index][key] = value
    return events

ENVELOPE = [
    pytest.param(_mutated(1, extra=1), 1, "event keys", id="extra-key"),
    pytest.param(_mutated(1, data=_DELETE), 1, "event keys", id="missing-data"),
    pytest.param(_mutated(1, data=[1]), 1, "data is not an object", id="data-not-object"),
    pytest.param(_mutated(1, ignorable=False), 1, "ignorable is not true", id="ignorable-false"),
    pytest.param(_mutated(1, time="now"), 1, "time is not an integer", id="time-not-int"),
    pytest.param(_mutated(1, seq=True), 1, "seq is not a non-negative integer", id="seq-bool"),
    pytest.param(_mutated(1, seq=2), 1, "breaks contiguity", id="seq-gap"),
    pytest.param(_mutated(0, seq=1), 0, "breaks contiguity", id="seq-not-0-based"),
    pytest.param(_mutated(2, type=""), 2, "type is not a non-empty string", id="type-empty"),
]


@pytest.mark.parametrize(("events", "seq", "what"), ENVELOPE)
def test_envelope_violation_is_named_with_its_seq(events: list[dict[str, Any]], seq: int, what: str) -> None:
    with pytest.raises(SessionError) as info:
        validate_log(events)
    assert info.value.code == "INVALID_LOG"
    assert what in info.value.message
    assert info.value.message.endswith(f"at seq {seq}")


def test_ignorable_unknown_type_is_accepted_anywhere() -> None:
    validate_log(build_log(("x/y", {}, {"ignorable": True}), T1, ("x/z", {"a": 1}, {"ignorable": True})))


def test_repair_not_started_result_needs_no_tool_call() -> None:
    validate_log(build_log(T1, S1, ("tool/result", {"turn": 1, "step": 1, "callId": "c9", "message": {},
                                                     "error": {"code": "TOOL_NOT_STARTED", "message": "x"}})))


def test_splices_and_descriptors_may_appear_inside_a_step() -> None:
    splice = {"target": "next-step", "start": 0, "inserted": []}
    descriptor = {"version": 1, "mode": "one-shot", "provider": "spawn", "label": "x"}
    validate_log(build_log(T1, S1, ("agent/inbox/spliced", splice), ("subagent/descriptor", descriptor), E1))


def test_make_header_omits_absent_optional_keys() -> None:
    assert make_header("session-a", created_at=5) == {
        "type": "session", "version": 1, "id": "session-a", "createdAt": 5, "delegationDepth": 0,
    }


def test_make_header_carries_child_lineage() -> None:
    header = make_header("child", parent_session="session-a", origin="subagent", delegation_depth=1,
                         cwd="/w", created_at=5)
    assert header == {"type": "session", "version": 1, "id": "child", "createdAt": 5, "cwd": "/w",
                      "parentSession": "session-a", "origin": "subagent", "delegationDepth": 1}
