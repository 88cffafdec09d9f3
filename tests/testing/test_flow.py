"""`project` (SPEC §20.1): the flow is read back from the durable logs alone.

The synthetic tree below is written as JSONL by hand, so every projection rule (child order by the
spawning call's position, claims that never ran, discarded and unclaimed notices, turn ends, tool
errors) is pinned without depending on runtime scheduling; the shipped scenario checks the same
rules on a real run.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from dsh.loader.headless import RunResult
from dsh.loader.session import make_header, read, validate_log
from dsh.loader.testing import Flow, normalize, project


def _write(home: Path, header: dict[str, Any], events: list[tuple[str, dict[str, Any]]]) -> None:
    path = home / "sessions" / header["id"] / "session.jsonl"
    path.parent.mkdir(parents=True)
    lines = [header] + [{"type": t, "seq": i, "time": 0, "data": d} for i, (t, d) in enumerate(events)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    validate_log(read(path).events)


def _msg(mid: str, text: str, source: dict[str, Any]) -> dict[str, Any]:
    return {"id": mid, "role": "user", "content": [{"type": "text", "text": text}], "source": source}


def _assistant(turn: int, step: int, content: list[dict[str, Any]], **extra: Any) -> tuple[str, dict[str, Any]]:
    message = {"id": str(uuid.uuid4()), "role": "assistant", "content": content,
               "source": {"kind": "model", "provider": "replay", "model": "replay"}}
    return "assistant/message", {"turn": turn, "step": step, "message": message, "usage": {"inputTokens": 1, "outputTokens": 1}, **extra}


def _result(turn: int, step: int, call_id: str, text: str, error: dict[str, str] | None = None) -> tuple[str, dict[str, Any]]:
    message = {"id": str(uuid.uuid4()), "role": "user", "source": {"kind": "tool", "callId": call_id},
               "content": [{"type": "tool-result", "toolCallId": call_id, "isError": error is not None,
                            "content": [{"type": "text", "text": text}]}]}
    data: dict[str, Any] = {"turn": turn, "step": step, "callId": call_id, "message": message}
    if error is not None:
        data["error"] = error
    return "tool/result", data


def _insert(target: str, start: int, message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "agent/inbox/spliced", {"target": target, "start": start, "inserted": [message]}


def _claim(target: str, count: int = 1) -> tuple[str, dict[str, Any]]:
    return "agent/inbox/spliced", {"target": target, "start": 0, "inserted": [], "removedCount": count}


class Tree:
    """Ids of the synthetic tree: a root and two children spawned in one step (B's call first)."""

    def __init__(self) -> None:
        self.root = f"session-{uuid.uuid4()}"
        self.a, self.b = str(uuid.uuid4()), str(uuid.uuid4())
        self.m = {name: str(uuid.uuid4()) for name in ("P1", "R1", "N1", "N2", "PA", "QA", "PB")}


def write_tree(home: Path) -> Tree:
    t = Tree()
    m = t.m
    report = {"kind": "subagent-report", "form": "relay", "senderSessionId": t.a}
    settled_b = {"kind": "subagent-settled", "form": "notice", "summary": "s", "senderSessionId": t.b, "stopReason": "error"}
    settled_a = {"kind": "subagent-settled", "form": "notice", "summary": "s", "senderSessionId": t.a, "stopReason": "aborted"}
    calls = [
        {"type": "reasoning", "text": "think"},
        {"type": "text", "text": "go"},
        {"type": "tool-call", "id": "c-b", "name": "subagent", "arguments": '{"label": "b"}'},
        {"type": "tool-call", "id": "c-a", "name": "subagent", "arguments": "not json"},
        {"type": "tool-call", "id": "c-x", "name": "interrupt_agent", "arguments": "{}"},
    ]
    _write(home, make_header(t.root, created_at=0), [
        _insert("next-turn", 0, _msg(m["P1"], "task", {"kind": "user"})),
        ("turn/start", {"turn": 1}),
        _claim("next-turn"),
        ("step/start", {"turn": 1, "step": 1}),
        ("user/message", _msg(m["P1"], "task", {"kind": "user"})),
        _assistant(1, 1, calls, finish="tool-calls"),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c-b", "name": "subagent", "arguments": '{"label": "b"}'}),
        _result(1, 1, "c-b", f"Subagent {t.b} is now working"),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c-a", "name": "subagent", "arguments": "not json"}),
        _result(1, 1, "c-a", f"Subagent {t.a} is now working"),
        ("tool/call", {"turn": 1, "step": 1, "callId": "c-x", "name": "interrupt_agent", "arguments": "{}"}),
        _result(1, 1, "c-x", "Error [UNAUTHORIZED]: no", {"code": "UNAUTHORIZED", "message": "no"}),
        _insert("next-step", 0, _msg(m["R1"], "report", report)),
        ("step/end", {"turn": 1, "step": 1}),
        _claim("next-step"),
        ("step/start", {"turn": 1, "step": 2}),
        ("user/message", _msg(m["R1"], "report", report)),
        _assistant(1, 2, [{"type": "text", "text": "done"}], finish="stop"),
        ("step/end", {"turn": 1, "step": 2}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
        _insert("next-turn", 0, _msg(m["N1"], "B settled", settled_b)),
        _insert("next-turn", 1, _msg(m["N2"], "A settled", settled_a)),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 1, "inserted": [], "removedCount": 1, "outcome": "canceled"}),
    ])
    child = {"parent_session": t.root, "origin": "subagent", "delegation_depth": 1}
    _write(home, make_header(t.a, created_at=1, **child), [  # created first, spawned second
        ("subagent/descriptor", {"version": 1, "mode": "continuable", "provider": "spawn", "label": "a", "spawnCallId": "c-a"}),
        _insert("next-turn", 0, _msg(m["PA"], "do a", {"kind": "user"})),
        ("turn/start", {"turn": 1}),
        _claim("next-turn"),
        ("step/start", {"turn": 1, "step": 1}),
        ("user/message", _msg(m["PA"], "do a", {"kind": "user"})),
        _assistant(1, 1, [{"type": "text", "text": "partial"}], interrupted=True),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "parent"}}}),
        _insert("next-turn", 0, _msg(m["QA"], "more", {"kind": "coordinator", "form": "relay", "senderSessionId": t.root})),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [], "removedCount": 1, "outcome": "canceled"}),
    ])
    _write(home, make_header(t.b, created_at=2, **child), [
        ("subagent/descriptor", {"version": 1, "mode": "one-shot", "provider": "spawn", "label": "b", "spawnCallId": "c-b"}),
        _insert("next-turn", 0, _msg(m["PB"], "do b", {"kind": "user"})),
        ("turn/start", {"turn": 1}),
        _claim("next-turn"),
        ("turn/end", {"turn": 1, "reason": {"kind": "error", "error": {"code": "CHECKPOINT_FAILED", "message": "simulated checkpoint failure"}}}),
    ])
    return t


RESULT = RunResult(root_session_id="", stop_reason="completed", exit_code=1, output="done", usage={})


def test_children_follow_their_spawning_call_not_their_creation(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    flow = project(tmp_path, t.root, RESULT, [], "synthetic")
    assert [(s["id"], s["position"], s["mode"]) for s in flow["sessions"]] == [
        (t.root, "0", "root"), (t.b, "0.1", "one-shot"), (t.a, "0.2", "continuable"),
    ]
    assert {k: flow["sessions"][1][k] for k in ("parent", "label", "spawnCall")} == {"parent": t.root, "label": "b", "spawnCall": "c-b"}
    assert "parent" not in flow["sessions"][0] and "label" not in flow["sessions"][0]


def test_step_shows_inputs_with_their_queue_outputs_and_tools(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    step1, step2 = project(tmp_path, t.root, RESULT, [], "synthetic")["sessions"][0]["turns"][0]["steps"]
    assert step1["input"] == [{"id": t.m["P1"], "queue": "next-turn", "source": "user", "text": "task"}]
    assert step1["output"] == {
        "text": "go",
        "reasoning": "think",
        "toolCalls": [
            {"id": "c-b", "name": "subagent", "arguments": {"label": "b"}},
            {"id": "c-a", "name": "subagent", "arguments": "not json"},
            {"id": "c-x", "name": "interrupt_agent", "arguments": {}},
        ],
        "finish": "tool-calls",
    }
    assert step1["tools"][2] == {"id": "c-x", "name": "interrupt_agent", "text": "Error [UNAUTHORIZED]: no", "error": "UNAUTHORIZED"}
    assert step2["input"] == [{"id": t.m["R1"], "queue": "next-step", "source": "subagent-report", "from": t.a, "text": "report"}]
    assert "tools" not in step2


def test_turn_ends_carry_cause_or_code_and_unrun_claims(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    _, b, a = project(tmp_path, t.root, RESULT, [], "synthetic")["sessions"]
    assert b["turns"] == [{
        "turn": 1,
        "steps": [],
        "claimedUnrun": [{"id": t.m["PB"], "queue": "next-turn", "source": "user", "text": "do b"}],
        "end": {"kind": "error", "code": "CHECKPOINT_FAILED", "message": "simulated checkpoint failure"},
    }]
    assert a["turns"][0]["end"] == {"kind": "aborted", "cause": "parent"}
    assert a["turns"][0]["steps"][0]["output"] == {"text": "partial", "interrupted": True}


def test_notices_record_where_they_were_inserted_and_claimed(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    flow = project(tmp_path, t.root, {"stopReason": "completed", "exitCode": 0, "output": "done"},
                   [{"code": "REPLAY_UNCONSUMED", "agent": "root", "message": "1/2"}], "synthetic")
    assert flow["notices"] == [
        {"id": t.m["R1"], "kind": "subagent-report", "from": t.a, "to": t.root, "queue": "next-step",
         "insertedAt": {"turn": 1, "lastStep": 1}, "claimedAt": {"turn": 1, "step": 2}},
        {"id": t.m["N1"], "kind": "subagent-settled", "from": t.b, "to": t.root, "stopReason": "error",
         "queue": "next-turn", "insertedAt": "idle", "claimedAt": "unclaimed"},
        {"id": t.m["N2"], "kind": "subagent-settled", "from": t.a, "to": t.root, "stopReason": "aborted",
         "queue": "next-turn", "insertedAt": "idle", "claimedAt": "discarded"},
    ]
    assert flow["result"] == {"stopReason": "completed", "exitCode": 0, "output": "done"}
    assert flow["violations"] == [{"code": "REPLAY_UNCONSUMED", "agent": "root"}]
    assert list(flow) == ["flow", "transcript", "sessions", "notices", "result", "violations"]


def test_sessions_outside_the_tree_are_ignored_even_when_corrupt(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    stray = tmp_path / "sessions" / "stray" / "session.jsonl"
    stray.parent.mkdir()
    stray.write_text("not json\n")
    assert len(project(tmp_path, t.root, RESULT, [], "synthetic")["sessions"]) == 3


def test_normalized_synthetic_tree_names_sessions_in_walk_order(tmp_path: Path) -> None:
    t = write_tree(tmp_path)
    flow = Flow(normalize(project(tmp_path, t.root, RESULT, [], "synthetic")))
    root, b, a = flow["sessions"]
    assert (root["id"], b["id"], a["id"]) == ("S1", "S2", "S3")
    assert root["turns"][0]["steps"][0]["tools"][0]["text"] == "Subagent S2 is now working"
    assert [n["id"] for n in flow["notices"]] == ["S1.M2", "S1.M3", "S1.M4"]
    assert b["turns"][0]["claimedUnrun"][0]["id"] == "S2.M1"
    assert a["turns"][0]["steps"][0]["input"][0]["id"] == "S3.M1"


def test_background_settlement_flow_pins_the_steered_notice(dsh_flow: Any) -> None:
    """Scenario (a): the notice lands in next-step while root S2 is held and S3 enters it."""
    flow = dsh_flow("background-settlement")
    root, child = flow["sessions"]
    assert (root["id"], root["position"], root["mode"]) == ("S1", "0", "root")
    assert (child["id"], child["position"], child["parent"], child["mode"], child["label"], child["spawnCall"]) == (
        "S2", "0.1", "S1", "continuable", "answer child", "start-child")
    steps = root["turns"][0]["steps"]
    assert steps[0]["output"]["toolCalls"] == [
        {"id": "start-child", "name": "subagent", "arguments": {"label": "answer child", "prompt": "Reply with CHILD_RESULT."}}]
    assert steps[0]["tools"][0]["text"].startswith("Subagent S2 is now working in the background.")
    assert steps[1] == {"step": 2, "input": [], "output": {"text": "STARTED", "finish": "stop"}}
    (notice_input,) = steps[2]["input"]
    assert notice_input["id"] == "S1.M2" and notice_input["source"] == "subagent-settled"
    assert notice_input["from"] == "S2" and notice_input["queue"] == "next-step"
    assert notice_input["text"].endswith("\nCHILD_RESULT")
    assert flow["notices"] == [{
        "id": "S1.M2", "kind": "subagent-settled", "from": "S2", "to": "S1", "stopReason": "completed",
        "queue": "next-step", "insertedAt": {"turn": 1, "lastStep": 1}, "claimedAt": {"turn": 1, "step": 3},
    }]
    assert flow["result"] == {"stopReason": "completed", "exitCode": 0, "output": "PARENT_RECEIVED_CHILD_RESULT"}
    assert flow["violations"] == []
