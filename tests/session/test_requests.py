"""The request log's format rules (issue 11 item 1, `loader.session.requests`).

`validate_log` checks `llm/system`, `llm/tools` and `llm/request`: a hash defined at most once, a
request naming only hashes defined before it, inside the step it names. `RequestLog` stores a value
only when its session's log lacks it, counting what a resumed log already holds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dsh.loader.errors import SessionError
from dsh.loader.session import RequestLog, Session, make_header, validate_log
from dsh.loader.session.requests import system_hash, tools_hash

from .helpers import build_log

TOOLS = [{"name": "report", "description": "d", "parameters": {"type": "object"}}]
SYS = ("llm/system", {"hash": system_hash("S"), "text": "S"}, {"ignorable": True})
TLS = ("llm/tools", {"hash": tools_hash(TOOLS), "tools": TOOLS}, {"ignorable": True})
T1 = ("turn/start", {"turn": 1})
S1 = ("step/start", {"turn": 1, "step": 1})
E1 = ("step/end", {"turn": 1, "step": 1})


def req(**changes: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    data = {"turn": 1, "step": 1, "model": "m", "messageCount": 0, "systemHash": system_hash("S"),
            "toolNames": ["report"], "toolsHash": tools_hash(TOOLS), **changes}
    return ("llm/request", data, {"ignorable": True})


def test_a_well_formed_request_log_is_accepted() -> None:
    validate_log(build_log(T1, S1, SYS, TLS, req(), E1, S1[:1] + ({"turn": 1, "step": 2},),
                           req(step=2), ("step/end", {"turn": 1, "step": 2})))


@pytest.mark.parametrize(("items", "seq", "what"), [
    pytest.param([T1, S1, TLS, req(), E1], 3, "systemHash", id="system-not-defined"),
    pytest.param([T1, S1, req(), SYS, TLS, E1], 2, "not defined before", id="defined-after-use"),
    pytest.param([SYS, T1, S1, SYS], 3, "defined twice", id="system-twice"),
    pytest.param([SYS, TLS, T1, req(), E1], 3, "llm/request outside a step", id="outside-step"),
    pytest.param([SYS, TLS, T1, S1, req(step=2)], 4, "does not name the open step", id="wrong-step"),
    pytest.param([SYS, TLS, T1, S1, req(messageCount="3")], 4, "messageCount", id="count-not-int"),
    pytest.param([("llm/tools", {"hash": "h", "tools": "x"}, {"ignorable": True})], 0, "list of tools",
                 id="tools-not-list"),
])
def test_request_log_violations_are_named_with_their_seq(items: list[Any], seq: int, what: str) -> None:
    with pytest.raises(SessionError) as info:
        validate_log(build_log(*items))
    assert info.value.code == "INVALID_LOG"
    assert what in info.value.message and info.value.message.endswith(f"at seq {seq}")


def test_record_stores_each_value_once_and_counts_a_resumed_logs_values() -> None:
    events = build_log(T1, S1, SYS, TLS, req(), E1, ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    session = Session(make_header("session-r"), events)  # as `store.load` hands a resumed log
    log = RequestLog(session)

    session.append("turn/start", {"turn": 2})
    session.append("step/start", {"turn": 2, "step": 1})
    log.record(turn=2, step=1, model="m", system="S", tools=TOOLS, message_count=2)
    log.record(turn=2, step=1, model="m", system="S2", tools=TOOLS, message_count=2)

    added = [(e["type"], e["data"].get("hash")) for e in session.events[len(events):] if e["type"] != "step/start"]
    assert added[1:] == [("llm/request", None), ("llm/system", system_hash("S2")), ("llm/request", None)]
    assert all(e.get("ignorable") for e in session.events[len(events) + 2:])
    validate_log(session.events)


def test_sessions_share_a_tool_lists_hash_but_a_schema_changed_in_place_gets_its_own() -> None:
    """Issue 13: the hash of one tool list is computed once for every session that sends it; the
    shared entry is keyed by the schema's identity and checked against a copy, so the same schema
    object mutated in between (equal names, descriptions and identity) is hashed again."""
    schema: dict[str, Any] = {"type": "object", "properties": {"label": {"type": "string"}}}
    tools = [{"name": "spawn", "description": "d", "parameters": schema}]

    def recorded_hash(session_id: str) -> str:
        session = Session(make_header(session_id))
        session.append("turn/start", {"turn": 1})
        session.append("step/start", {"turn": 1, "step": 1})
        digest = RequestLog(session).record(turn=1, step=1, model="m", system="S", tools=tools, message_count=0)
        [defined] = [e["data"]["hash"] for e in session.events if e["type"] == "llm/tools"]
        assert defined == digest["toolsHash"]
        return str(digest["toolsHash"])

    before = tools_hash(tools)
    assert recorded_hash("session-a") == recorded_hash("session-b") == before
    schema["properties"]["label"]["type"] = "integer"  # the same dict object, new content
    assert recorded_hash("session-c") == tools_hash(tools) != before


def test_the_logged_tool_list_is_a_json_copy_the_live_schemas_cannot_change() -> None:
    """Issue 13: `llm/tools` events hold one shared JSON copy of the list (appended without a copy
    of their own); changing the live schema afterwards changes no log, and each log's event equals
    what a reload of its line gives."""
    import json

    from dsh.loader.session.envelope import encode_line

    schema: dict[str, Any] = {"type": "object", "required": ["label"]}
    tools = [{"name": "spawn-copy-test", "description": "d", "parameters": schema}]
    logged = []
    for sid in ("session-x1", "session-x2"):
        session = Session(make_header(sid))
        session.append("turn/start", {"turn": 1})
        session.append("step/start", {"turn": 1, "step": 1})
        RequestLog(session).record(turn=1, step=1, model="m", system="S", tools=tools, message_count=0)
        [event] = [e for e in session.events if e["type"] == "llm/tools"]
        assert json.loads(encode_line(event)) == event
        logged.append(event["data"]["tools"])
    assert logged[0] is logged[1] and logged[0][0]["parameters"] is not schema
    schema["required"].append("other")
    assert logged[0] == [{"name": "spawn-copy-test", "description": "d",
                          "parameters": {"type": "object", "required": ["label"]}}]


@pytest.mark.parametrize("system", [
    pytest.param("You are dsh.", id="plain"),
    pytest.param("héllo \u2028 \" \\ \n tab\t", id="unicode"),
    pytest.param("lone \ud800 surrogate", id="lone-surrogate"),
])
def test_shared_request_texts_write_the_line_an_append_would(system: str) -> None:
    """Issue 13: the `llm/system` and `llm/tools` data texts are made once for all sessions
    (`Session.append_encoded`); every session's line must still be `encode_line` of its event, and
    the event what a reload of that line gives, the second session's as well as the first's."""
    import json

    from dsh.loader.session.envelope import encode_line

    tools = [{"name": "spawn-text-test", "description": "dé\u2028", "parameters": {"type": "object", "n": 1.5}}]
    for sid in ("session-t1", "session-t2"):
        lines: list[tuple[dict[str, Any], bytes]] = []
        session = Session(make_header(sid), line_sink=lambda event, line: lines.append((event, line)))
        session.append("turn/start", {"turn": 1})
        session.append("step/start", {"turn": 1, "step": 1})
        RequestLog(session).record(turn=1, step=1, model="m", system=system, tools=tools, message_count=0)
        shared = [(event, line) for event, line in lines if event["type"] in ("llm/system", "llm/tools")]
        assert [event["type"] for event, _ in shared] == ["llm/system", "llm/tools"]
        for event, line in shared:
            assert line == encode_line(event)
            assert json.loads(line) == event
        assert shared[0][0]["data"] == {"hash": system_hash(system), "text": system}
        assert shared[1][0]["data"] == {"hash": tools_hash(tools), "tools": tools}


@given(st.text(st.characters(blacklist_categories=())),
       st.lists(st.one_of(st.text(st.characters(blacklist_categories=())), st.none(), st.integers()), max_size=3),
       st.one_of(st.integers(min_value=0), st.booleans()))
@settings(max_examples=60)
def test_every_request_record_line_is_what_the_encoder_writes(model: str, names: list[Any], count: int) -> None:
    """issue 13: `llm/request`'s text is formatted, not encoded, when its fields are exact strs and
    ints; each line must still be `encode_line` of the event, whatever the model and tool names."""
    from dsh.loader.session.envelope import encode_line

    lines: list[tuple[dict[str, Any], bytes]] = []
    session = Session(make_header("session-r"), line_sink=lambda event, line: lines.append((event, line)))
    log = RequestLog(session)
    tools = [{"name": n, "description": "d", "parameters": {"type": "object"}} for n in names]
    log.record(turn=1, step=1, model=model, system="S", tools=tools, message_count=count)
    log.record(turn=1, step=2, model=model, system="S", tools=tools, message_count=count)
    assert [event["type"] for event, _ in lines] == ["llm/system", "llm/tools", "llm/request", "llm/request"]
    for event, line in lines:
        assert line == encode_line(event)
        assert json.loads(line)["data"] == event["data"]
