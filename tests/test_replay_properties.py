"""Random trees replay to one flow (issue 10, SPEC §26 item 1): a property test over generated
transcripts, none of them fenced.

Each example is a tree the root starts in one step (concurrent siblings), whose children reply,
report (under `wakeup` or `quiet-reports`) and then reply, fail with a provider error, stop at
`max-tokens`, or hang until the root interrupts them; the root may queue follow-ups (which resume
settled children cold), and a child may start a grandchild. The root has more text replies than
any schedule can use, so a run ends with a deterministic `REPLAY_UNCONSUMED` rather than an
exhausted script. What is checked is only the promise: ten replays of the example give one flow,
byte for byte (`check_repeats` raises `FlowsDiffer` with the diff otherwise).

Examples are derandomized, so CI sees the same 100 trees every time; each example runs ten times in
one event loop (the per-run loop is what `tests/test_determinism.py` varies).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh.loader.testing import TranscriptViolation, arun_flows, check_repeats, plan_flow

REPLAYS = 10
KINDS = ("text", "report", "error", "max-tokens", "hang", "grandchild")


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(min_value=1, max_value=3))
    kinds = [draw(st.sampled_from(KINDS)) for _ in range(n)]
    quiet = draw(st.booleans())
    agents: dict[str, Any] = {}
    spawns, later = [], []
    extra_root_replies = 0
    for i, kind in enumerate(kinds, start=1):
        key, call_id = f"c{i}", f"start-c{i}"
        spawns.append({"id": call_id, "name": "subagent", "arguments": {"label": key, "prompt": f"Work {i}."}})
        replies: list[dict[str, Any]] = []
        if kind == "text":
            replies.append({"text": f"C{i}_OK"})
        elif kind == "report":
            replies.append({"toolCalls": [{"id": f"report-c{i}", "name": "report", "arguments": {"output": f"C{i}_REPORT"}}]})
            replies.append({"text": f"C{i}_AFTER_REPORT"})
            extra_root_replies += 1
        elif kind == "error":
            replies.append({"error": {"code": "SERVER_ERROR", "message": f"c{i} failed", "status": 500}})
        elif kind == "max-tokens":
            replies.append({"text": f"C{i}_PART", "finish": "max-tokens"})
        elif kind == "hang":
            replies.append({"hang": {"text": f"c{i} partial"}})
            later.append({"id": f"stop-c{i}", "name": "interrupt_agent", "arguments": {"agent_id": f"{{{{child:{call_id}}}}}"}})
        else:  # grandchild
            replies.append({"toolCalls": [{"id": f"start-g{i}", "name": "subagent",
                                           "arguments": {"label": f"g{i}", "prompt": "Deep work."}}]})
            replies.append({"text": f"C{i}_WAITING"})
            replies.append({"text": f"C{i}_GOT_GRANDCHILD"})
            agents[f"g{i}"] = {"spawnedBy": f"start-g{i}", "replies": [{"text": f"G{i}_OK"}]}
        if kind != "hang" and draw(st.booleans()):
            later.append({"id": f"more-c{i}", "name": "send_message",
                          "arguments": {"agent_id": f"{{{{child:{call_id}}}}}", "message": f"More {i}."}})
            replies.append({"text": f"C{i}_MORE_OK"})
            extra_root_replies += 1
        agents[key] = {"spawnedBy": call_id, "replies": replies}
    root: list[dict[str, Any]] = [{"toolCalls": spawns}]
    if later:
        later = draw(st.permutations(later))
        split = draw(st.integers(min_value=1, max_value=len(later)))
        root += [{"toolCalls": later[:split]}, *([{"toolCalls": later[split:]}] if later[split:] else [])]
    root += [{"text": f"ROOT_{j}"} for j in range(1 + 2 * n + extra_root_replies + 2)]
    doc: dict[str, Any] = {"version": 1, "name": "random-tree", "task": "Run the tree."}
    if quiet:
        doc["overlays"] = ["quiet-reports"]
    doc["agents"] = {"root": {"replies": root}, **agents}
    return doc


@settings(max_examples=100, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(trees())
def test_a_random_tree_replays_to_one_flow_ten_times(doc: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory(prefix="dsh-prop-") as tmp:
        path = Path(tmp) / "random-tree.yaml"
        path.write_text(json.dumps(doc))  # JSON is YAML
        plan = plan_flow(path)
        outcomes = asyncio.run(arun_flows(plan, REPLAYS, timeout=20, home=Path(tmp)))
    try:
        flow = check_repeats(plan.name, outcomes)  # FlowsDiffer, with the diff, propagates
    except TranscriptViolation as exc:  # all ten agree on a violation (a spare reply): one flow
        flow = exc.flow
    assert flow["sessions"][0]["turns"], "the root ran"
