"""The in-memory Session (SPEC §5.1–§5.3, §4.1).

`append` is one sync span: snapshot → sink → list append → notify. These tests pin the order, the
failure atomicity (a refused event leaves no trace) and the re-entrancy rule: observers never append.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import pytest

import dsh.loader.session

from dsh import loader
from dsh.loader.errors import ReentrantAppend, SessionError
from dsh.loader.session import Event, Session, make_header


def new_session(**kw: Any) -> Session:
    ticks = iter(range(5000, 6000))
    return Session(make_header("session-t", created_at=1), clock=lambda: next(ticks), **kw)


def test_package_exports_exactly_the_public_api() -> None:
    assert sorted(loader.session.__all__) == sorted([
        "EVENT_TYPES", "ErrorData", "Event", "FileIO", "LoggedRequest", "PruneOutcome", "REQUEUED", "ReadResult",
        "RequestLog", "Session",
        "SessionStore", "StoreIO", "TurnEnd", "TurnEndKind", "interrupted_turn_closers", "is_unmaterialized",
        "logged_requests", "make_header", "open_regular", "prune_tree", "prune_unmaterialized", "read", "replay_inbox", "unmaterialized_ids", "validate_log",
        # issue 13: the text `append` would make, made once (`snapshot`) or formatted for fixed shapes
        "snapshot", "insertion_text", "removal_text", "step_text", "turn_end_text", "turn_text",
    ])
    for name in loader.session.__all__:
        assert hasattr(loader.session, name)


def test_append_builds_the_envelope_with_contiguous_seq_and_clock_time() -> None:
    session = new_session()
    first = session.append("turn/start", {"turn": 1})
    second = session.append("x/note", {"a": 1}, ignorable=True)
    assert first == {"type": "turn/start", "seq": 0, "time": 5000, "data": {"turn": 1}}
    assert second == {"type": "x/note", "seq": 1, "time": 5001, "data": {"a": 1}, "ignorable": True}
    assert session.events == [first, second]
    assert session.id == "session-t"


def test_append_snapshots_data_so_later_mutation_does_not_leak_in() -> None:
    session = new_session()
    data: dict[str, Any] = {"target": "next-turn", "start": 0, "inserted": [{"id": "m", "tags": ("a",)}]}
    event = session.append("agent/inbox/spliced", data)
    data["inserted"][0]["id"] = "changed"
    data["start"] = 9
    assert event["data"] == {"target": "next-turn", "start": 0, "inserted": [{"id": "m", "tags": ["a"]}]}


@pytest.mark.parametrize("bad", [
    pytest.param({"x": math.nan}, id="nan"),
    pytest.param({"x": math.inf}, id="infinity"),
    pytest.param({"x": {1, 2}}, id="set"),
    pytest.param({"x": object()}, id="object"),
    pytest.param([1], id="not-a-dict"),
])
def test_non_json_data_is_refused_before_anything_changes(bad: Any) -> None:
    sunk: list[Event] = []
    seen: list[Event] = []
    session = new_session(sink=sunk.append)
    session.subscribe(seen.append)
    with pytest.raises(SessionError) as info:
        session.append("turn/start", bad)
    assert info.value.code == "INVALID_EVENT"
    assert session.events == [] and sunk == [] and seen == []


def test_unknown_type_is_refused_unless_ignorable() -> None:
    session = new_session()
    with pytest.raises(SessionError) as info:
        session.append("session/fork", {})
    assert info.value.code == "INVALID_EVENT"
    assert session.events == []


def test_append_to_a_closed_session_raises_session_closed() -> None:
    session = new_session()
    session.closed = True
    with pytest.raises(SessionError) as info:
        session.append("turn/start", {"turn": 1})
    assert info.value.code == "SESSION_CLOSED"


def test_sink_sees_the_event_before_it_is_appended_and_published() -> None:
    order: list[str] = []
    session: Session

    def sink(event: Event) -> None:
        order.append(f"sink seq={event['seq']} len={len(session.events)}")

    session = new_session(sink=sink)
    session.subscribe(lambda event: order.append(f"observer len={len(session.events)}"))
    session.append("turn/start", {"turn": 1})
    assert order == ["sink seq=0 len=0", "observer len=1"]


def test_sink_failure_leaves_events_unchanged_and_publishes_nothing() -> None:
    fail = True

    def sink(event: Event) -> None:
        if fail:
            raise OSError("queue refused")

    seen: list[Event] = []
    session = new_session(sink=sink)
    session.subscribe(seen.append)
    with pytest.raises(OSError):
        session.append("turn/start", {"turn": 1})
    assert session.events == [] and seen == []
    fail = False
    assert session.append("turn/start", {"turn": 1})["seq"] == 0


def test_observers_run_in_registration_order_and_can_unsubscribe() -> None:
    calls: list[str] = []
    session = new_session()
    session.subscribe(lambda e: calls.append(f"a{e['seq']}"))
    unsubscribe = session.subscribe(lambda e: calls.append(f"b{e['seq']}"))
    session.subscribe(lambda e: calls.append(f"c{e['seq']}"))
    session.append("turn/start", {"turn": 1})
    unsubscribe()
    unsubscribe()  # idempotent
    session.append("step/start", {"turn": 1, "step": 1})
    assert calls == ["a0", "b0", "c0", "a1", "c1"]


def test_observer_append_raises_reentrant_append() -> None:
    caught: list[BaseException] = []
    session = new_session()

    def observer(event: Event) -> None:
        try:
            session.append("step/start", {"turn": 1, "step": 1})
        except ReentrantAppend as exc:
            caught.append(exc)

    session.subscribe(observer)
    session.append("turn/start", {"turn": 1})
    assert [exc.code for exc in caught] == ["REENTRANT_APPEND"]
    assert [e["type"] for e in session.events] == ["turn/start"]
    session.append("step/start", {"turn": 1, "step": 1})  # publication over: appends work again
    assert len(session.events) == 2


def test_observer_failure_is_logged_not_raised_and_later_observers_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[int] = []
    session = new_session()

    def broken(event: Event) -> None:
        raise RuntimeError("observer broke")

    session.subscribe(broken)
    session.subscribe(lambda e: seen.append(e["seq"]))
    with caplog.at_level(logging.ERROR, logger="dsh.loader.session.session"):
        event = session.append("turn/start", {"turn": 1})
    assert event["seq"] == 0 and seen == [0]
    assert any("observer failed" in r.getMessage() and r.exc_info for r in caplog.records)


async def test_async_observer_is_scheduled_and_its_failure_logged() -> None:
    logged = asyncio.Event()
    records: list[logging.LogRecord] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)
            logged.set()

    async def observer(event: Event) -> None:
        raise RuntimeError("async observer broke")

    log = logging.getLogger("dsh.loader.session.session")
    handler = Catch(logging.ERROR)
    log.addHandler(handler)
    try:
        session = new_session()
        session.subscribe(observer)
        session.append("turn/start", {"turn": 1})
        assert records == []  # scheduled, not run inside the append
        await asyncio.wait_for(logged.wait(), 5)
    finally:
        log.removeHandler(handler)
    assert "async observer failed" in records[0].getMessage()
    assert isinstance(records[0].exc_info[1], RuntimeError)  # type: ignore[index]


def test_derive_messages_walks_user_assistant_and_tool_results_only() -> None:
    user = {"id": "u", "role": "user", "content": [{"type": "text", "text": "q"}], "source": {"kind": "user"}}
    said = {"id": "a", "role": "assistant", "content": [{"type": "text", "text": "x"}],
            "source": {"kind": "model", "provider": "p", "model": "m"}}
    empty = {**said, "id": "a2", "content": []}
    result = {"id": "r", "role": "user", "source": {"kind": "tool", "callId": "c"},
              "content": [{"type": "tool-result", "toolCallId": "c", "isError": False, "content": []}]}
    session = new_session()
    session.append("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [user]})
    session.append("turn/start", {"turn": 1})
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("user/message", user)
    session.append("assistant/message", {"turn": 1, "step": 1, "message": said, "finish": "tool-calls"})
    session.append("tool/call", {"turn": 1, "step": 1, "callId": "c", "name": "n", "arguments": "{}"})
    session.append("tool/result", {"turn": 1, "step": 1, "callId": "c", "message": result})
    session.append("assistant/message", {"turn": 1, "step": 1, "message": empty, "interrupted": True})
    session.append("step/end", {"turn": 1, "step": 1})
    assert session.derive_messages() == [user, said, result]


@pytest.mark.parametrize("data", [
    pytest.param({"turn": 1}, id="plain"),
    pytest.param({"text": "héllo \u2028 \" \\ \n", "nested": [{"a": None, "b": 1.5, "c": True}]}, id="unicode"),
    pytest.param({"text": "lone \ud800 surrogate"}, id="lone-surrogate"),
])
@pytest.mark.parametrize("ignorable", [False, True])
def test_the_line_handed_to_the_store_is_encode_line_of_the_event(data: dict[str, Any], ignorable: bool) -> None:
    """Issue 13: the data is encoded once; the line the store writes must still be byte-identical to
    `encode_line(event)`, the format every reader and every replay flow compares."""
    from dsh.loader.session.envelope import encode_line

    lines: list[tuple[Event, bytes]] = []
    session = Session(make_header("session-x"), line_sink=lambda event, line: lines.append((event, line)))
    event = session.append("x-custom" if ignorable else "turn/start", data, ignorable=ignorable)
    assert lines == [(event, encode_line(event))]
    assert event["data"] == data and event["data"] is not data


@pytest.mark.parametrize("bad", [
    pytest.param({"x": {(1, 2): 3}}, id="tuple-key"),
    pytest.param({"x": float("nan")}, id="nan"),
    pytest.param({"x": object()}, id="object"),
])
def test_append_owned_refuses_what_append_refuses(bad: Any) -> None:
    """The trusted path skips only the decoded copy: the JSON check (and its error) stays."""
    session = new_session()
    for append in (session.append, session.append_owned):
        with pytest.raises(SessionError) as info:
            append("turn/start", bad)
        assert info.value.code == "INVALID_EVENT"
    assert session.events == []


def test_append_normalises_tuples_and_non_str_keys_as_a_reload_does() -> None:
    """External data is still copied through its JSON text: what memory holds is what a reload reads."""
    import json

    from dsh.loader.session.envelope import encode_line

    lines: list[bytes] = []
    session = Session(make_header("session-x"), line_sink=lambda event, line: lines.append(line))
    event = session.append("user/message", {"id": "m", "tags": ("a", 1), "by": {1: "x", None: "y", 2.5: "z"}})
    assert event["data"] == {"id": "m", "tags": ["a", 1], "by": {"1": "x", "null": "y", "2.5": "z"}}
    assert json.loads(lines[0]) == event and lines == [encode_line(event)]


def test_append_owned_keeps_the_data_itself_and_writes_the_same_line() -> None:
    from dsh.loader.session.envelope import encode_line

    lines: list[tuple[Event, bytes]] = []
    session = Session(make_header("session-x"), line_sink=lambda event, line: lines.append((event, line)))
    data = {"turn": 1, "step": 2}
    event = session.append_owned("step/start", data)
    assert event["data"] is data
    assert lines == [(event, encode_line(event))]


@pytest.mark.parametrize("data", [
    pytest.param({"hash": "h", "text": "plain"}, id="plain"),
    pytest.param({"hash": "h", "tools": [{"d": "héllo \u2028", "n": 1.5, "z": None}]}, id="unicode"),
    pytest.param({"hash": "h", "text": "lone \ud800 surrogate"}, id="lone-surrogate"),
])
def test_append_encoded_writes_what_append_writes(data: dict[str, Any]) -> None:
    """Issue 13: an event whose data text the caller made once (`_codec._encode`, as the request
    records do) is the same event, on the same line, as `append_owned` gives; the data is kept."""
    from dsh.loader.session._codec import _encode
    from dsh.loader.session.envelope import encode_line

    lines: list[tuple[Event, bytes]] = []
    session = Session(make_header("session-x"), line_sink=lambda event, line: lines.append((event, line)))
    owned = session.append_owned("llm/system", dict(data), ignorable=True)
    encoded = session.append_encoded("llm/system", data, _encode(data), ignorable=True)
    assert encoded["data"] is data and encoded["ignorable"] is True
    assert lines[1] == (encoded, encode_line(encoded))
    assert lines[0][1].replace(b'"seq":0', b'"seq":1') == lines[1][1].replace(
        f'"time":{encoded["time"]}'.encode(), f'"time":{owned["time"]}'.encode())


def test_a_failed_encode_leaves_no_circular_marker_behind() -> None:
    """The reused C encoder keeps its circular-reference markers between calls; a failure mid-encode
    must empty them, or a later event holding the same object is refused as circular."""
    session = new_session()
    shared: dict[str, Any] = {"k": "v"}
    cyclic: dict[str, Any] = {"shared": shared}
    shared["back"] = cyclic
    with pytest.raises(SessionError):
        session.append("turn/start", {"x": cyclic})
    del shared["back"]
    event = session.append("turn/start", {"x": cyclic, "y": shared})
    assert event["data"] == {"x": {"shared": {"k": "v"}}, "y": {"k": "v"}}


def test_a_failed_owned_encode_is_refused_and_leaves_no_marker_behind() -> None:
    """`append_owned` encodes inline (issue 13): a non-JSON or circular value is INVALID_EVENT, the
    log and the sink stay untouched, and the reused encoder's markers are emptied."""
    lines: list[bytes] = []
    session = new_session(line_sink=lambda event, line: lines.append(line))
    shared: dict[str, Any] = {"k": "v"}
    cyclic: dict[str, Any] = {"shared": shared}
    shared["back"] = cyclic
    for bad in ({"x": cyclic}, {"x": math.nan}, {"x": {1, 2}}):
        with pytest.raises(SessionError) as info:
            session.append_owned("turn/start", bad)
        assert info.value.code == "INVALID_EVENT"
    assert session.events == [] and lines == []
    del shared["back"]
    event = session.append_owned("turn/start", {"x": cyclic, "y": shared})
    assert event["data"] == {"x": {"shared": {"k": "v"}}, "y": {"k": "v"}}


def test_the_line_sink_gets_exactly_encode_line_of_each_event() -> None:
    """The line is built inline from the data's text (issue 13): it must be `encode_line(event)`
    byte for byte, owned or copied, ignorable or not, a first-seen type, and lone surrogates."""
    from dsh.loader.session.envelope import encode_line

    pairs: list[tuple[Event, bytes]] = []
    session = new_session(line_sink=lambda event, line: pairs.append((event, line)))
    session.append_owned("turn/start", {"turn": 1, "t": "é \u2028 \"q\""})
    session.append("user/message", {"id": "m", "content": [{"type": "text", "text": "x"}], "n": (1, 2)})
    session.append_owned("x/never-seen-before", {"a": [1.5, None, True]}, ignorable=True)
    session.append_owned("x/never-seen-before", {"a": 2}, ignorable=True)
    session.append_owned("turn/start", {"bad": "\ud800"})
    assert len(pairs) == 5
    for event, line in pairs:
        assert line == encode_line(event)
