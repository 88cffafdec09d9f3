"""`normalize` and `dump_flow` (SPEC §20.2): the stored bytes name ids by role and order and never
depend on the run that produced them."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from dsh.loader.testing import dump_flow, normalize


def _flow(root: str, child: str, prompt_id: str, notice_id: str, other: str, call_id: str = "start-child") -> dict[str, Any]:
    return {
        "flow": 1,
        "transcript": "t",
        "sessions": [
            {"id": root, "position": "0", "mode": "root", "turns": [{"turn": 1, "steps": [{
                "step": 1,
                "input": [{"id": prompt_id, "queue": "next-turn", "source": "user", "text": f"trace {other}"}],
                "output": {"toolCalls": [{"id": call_id, "name": "subagent", "arguments": {"prompt": "x"}}]},
                "tools": [{"id": call_id, "name": "subagent", "text": f"Subagent {child} is now working; message {notice_id}."}],
            }], "end": {"kind": "completed"}}]},
            {"id": child, "position": "0.1", "parent": root, "mode": "continuable", "spawnCall": call_id, "turns": []},
        ],
        "notices": [{"id": notice_id, "kind": "subagent-settled", "from": child, "to": root, "queue": "next-step",
                     "insertedAt": "idle", "claimedAt": "unclaimed"}],
        "result": {"stopReason": "completed", "exitCode": 0, "output": f"{root} done"},
        "violations": [],
    }


def _ids() -> list[str]:
    return [f"session-{uuid.uuid4()}", str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())]


def test_ids_inside_strings_become_placeholders() -> None:
    root, child, prompt, notice, other = _ids()
    flow = normalize(_flow(root, child, prompt, notice, other))
    step = flow["sessions"][0]["turns"][0]["steps"][0]
    assert step["input"][0] == {"id": "S1.M1", "queue": "next-turn", "source": "user", "text": "trace U1"}
    assert step["tools"][0]["text"] == "Subagent S2 is now working; message S1.M2."
    assert flow["sessions"][1]["parent"] == "S1"
    assert flow["notices"][0]["id"] == "S1.M2" and flow["notices"][0]["from"] == "S2"
    assert flow["result"]["output"] == "S1 done"  # the root id is replaced whole, not as session-U…


def test_message_numbers_follow_first_appearance_even_inside_text() -> None:
    """A send_message result names the child's message before the child's step enters it."""
    root, child, prompt, notice, other = _ids()
    late = str(uuid.uuid4())
    flow = _flow(root, child, prompt, notice, other)
    flow["sessions"][0]["turns"][0]["steps"][0]["tools"][0]["text"] = f"queued {late}; then {notice}"
    flow["sessions"][1]["turns"] = [{"turn": 1, "steps": [{
        "step": 1, "input": [{"id": late, "queue": "next-turn", "source": "coordinator", "text": "x"}], "output": {},
    }], "end": {"kind": "completed"}}]
    normalized = normalize(flow)
    # Numbered per receiving session: the child's first message is S2.M1 wherever it first appears.
    assert normalized["sessions"][0]["turns"][0]["steps"][0]["tools"][0]["text"] == "queued S2.M1; then S1.M2"
    assert normalized["sessions"][1]["turns"][0]["steps"][0]["input"][0]["id"] == "S2.M1"
    assert normalized["notices"][0]["id"] == "S1.M2"


def test_transcript_tool_call_ids_are_kept_verbatim_even_when_uuid_shaped() -> None:
    call_id = str(uuid.uuid4())
    flow = normalize(_flow(*_ids(), call_id=call_id))
    assert flow["sessions"][1]["spawnCall"] == call_id
    assert flow["sessions"][0]["turns"][0]["steps"][0]["tools"][0]["id"] == call_id


def test_normalize_does_not_touch_its_input() -> None:
    ids = _ids()
    flow = _flow(*ids)
    normalize(flow)
    assert flow == _flow(*ids)


def test_two_runs_with_different_ids_dump_identical_bytes() -> None:
    assert dump_flow(normalize(_flow(*_ids()))) == dump_flow(normalize(_flow(*_ids())))


def test_dump_keeps_key_order_and_block_style() -> None:
    text = dump_flow(normalize(_flow(*_ids())))
    assert text.startswith("flow: 1\ntranscript: t\nsessions:\n- id: S1\n  position: '0'\n  mode: root\n")
    top = [line.split(":")[0] for line in text.splitlines() if line[:1].isalpha()]
    assert top == ["flow", "transcript", "sessions", "notices", "result", "violations"]
    assert "{" not in text.replace("arguments:\n", "")  # no flow-style mappings anywhere
    assert "violations: []\n" in text


def test_multi_line_text_is_a_literal_block_and_round_trips() -> None:
    flow = normalize(_flow(*_ids()))
    flow["result"]["output"] = "first line\nsecond line"
    text = dump_flow(flow)
    assert "  output: |-\n    first line\n    second line\n" in text
    assert YAML(typ="safe").load(text)["result"]["output"] == "first line\nsecond line"


def test_shared_objects_are_written_out_without_anchors() -> None:
    flow = normalize(_flow(*_ids()))
    shared = {"turn": 1, "lastStep": 1}
    flow["notices"] = [dict(flow["notices"][0], insertedAt=shared), dict(flow["notices"][0], insertedAt=shared)]
    text = dump_flow(flow)
    assert "&" not in text and "*" not in text
    assert text.count("lastStep: 1") == 2


# -- issue 10: snapshot diffs stay local -----------------------------------------------------------

def _two_workers(tmp_path: Path, messages: list[str]) -> Path:
    import json

    sends = [{"id": f"send-{i}", "name": "send_message",
              "arguments": {"agent_id": "{{child:start-w2}}", "message": m}} for i, m in enumerate(messages)]
    doc = {"version": 1, "name": "two-workers", "task": "go", "agents": {
        "root": {"replies": [
            {"toolCalls": [{"id": "start-w1", "name": "subagent", "arguments": {"label": "w1", "prompt": "One."}},
                           {"id": "start-w2", "name": "subagent", "arguments": {"label": "w2", "prompt": "Two."}}]},
            {"toolCalls": sends}, {"text": "STARTED"}, {"text": "N1"}]},
        "w1": {"spawnedBy": "start-w1", "replies": [{"text": "W1"}]},
        "w2": {"spawnedBy": "start-w2", "replies": [{"text": "W2"}, *({"text": f"W2_{m}"} for m in messages)]},
    }}
    path = tmp_path / f"two-workers-{len(messages)}.yaml"
    path.write_text(json.dumps(doc))
    return path


def _message_ids(flow: Any, position: str) -> list[str]:
    [session] = [s for s in flow["sessions"] if s["position"] == position]
    return [e["id"] for t in session["turns"] for s in t["steps"] for e in s["input"]] + [
        e["id"] for t in session["turns"] for e in t.get("claimedUnrun", [])]


def test_one_more_message_to_one_session_renumbers_only_that_sessions_messages(dsh_flow: Any, tmp_path: Path) -> None:
    """w2 gets a second follow-up: root's and w1's message ids are unchanged, and every message-id
    line that changed belongs to w2 (S3)."""
    one = dsh_flow(_two_workers(tmp_path, ["MORE"]))
    two = dsh_flow(_two_workers(tmp_path, ["MORE", "EVEN_MORE"]))
    for position in ("0", "0.1"):  # root, w1
        assert _message_ids(one, position) == _message_ids(two, position)
    assert [n["id"] for n in one["notices"]] == [n["id"] for n in two["notices"]]
    assert sorted(_message_ids(two, "0.2")) == ["S3.M1", "S3.M2", "S3.M3"]
    import difflib

    changed = [line for line in difflib.unified_diff(one.yaml.splitlines(), two.yaml.splitlines(), lineterm="")
               if line[:1] in "+-" and not line.startswith(("+++", "---")) and "M" in line and "id: " in line]
    assert changed and all("S3.M" in line for line in changed), changed
