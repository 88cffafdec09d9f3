"""The shipped scenario catalogue (SPEC §21): each flow equals its stored snapshot (§23 item 114) and
every pinned fact of its §21 row holds.

The snapshot alone would pin whatever the runtime did the day it was written; the explicit
assertions restate the §21 row, so a reviewer can check a regenerated snapshot against the spec
and a wrong snapshot cannot be blessed silently. Facts about the interleaving of sessions ("no
child sends a request before root step 2 is claimed", "no request between the interrupt and D")
are not visible in a flow; the `*_timeline` tests read them from one global timeline of the same
run (`run_kit.run_timeline`): requests as the replay provider serves them and every committed log
event, in the order the loop produced them.

Flows are read by position (`'0'` root, `'0.1'` first child …); ids are already normalized
(`S1` root, `S2` first child, `M…` messages).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from run_kit import SCENARIOS, run_timeline
from typer.testing import CliRunner

from dsh.cli.main import app
from dsh.loader.config import compose
from dsh.loader.transcripts import load_transcript


# -- reading a flow ------------------------------------------------------------------------------
def session(flow: Any, position: str) -> dict[str, Any]:
    return next(s for s in flow["sessions"] if s["position"] == position)


def turn(flow: Any, position: str, number: int) -> dict[str, Any]:
    return next(t for t in session(flow, position)["turns"] if t["turn"] == number)


def step(flow: Any, position: str, turn_number: int, number: int) -> dict[str, Any]:
    return next(s for s in turn(flow, position, turn_number)["steps"] if s["step"] == number)


def tool_calls(flow: Any, position: str) -> list[dict[str, Any]]:
    return [c for t in session(flow, position)["turns"] for s in t["steps"] for c in s["output"].get("toolCalls", [])]


def last_line(text: str) -> str:
    """The subagent output a notice carries is its last line (§9: "Most recent output …:\\n<output>")."""
    return text.splitlines()[-1]


def common_facts(flow: Any, output: str) -> None:
    """§21: every scenario ends with `violations: []` and exit 0."""
    assert flow["violations"] == []
    assert flow["result"] == {"stopReason": "completed", "exitCode": 0, "output": output}


# -- (a) ---------------------------------------------------------------------------------------
def test_a_background_settlement_notice_is_steered_into_the_held_root_step(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("background-settlement")
    assert flow == flow_snapshot
    common_facts(flow, "PARENT_RECEIVED_CHILD_RESULT")

    root = turn(flow, "0", 1)
    assert [t["turn"] for t in session(flow, "0")["turns"]] == [1]  # no extra root turn
    assert [s["step"] for s in root["steps"]] == [1, 2, 3]
    # S2 claimed nothing (the notice arrived while its pre-step was held) and finished `stop` ...
    assert step(flow, "0", 1, 2)["input"] == []
    assert step(flow, "0", 1, 2)["output"] == {"text": "STARTED", "finish": "stop"}
    # ... yet S3 ran and entered the notice from next-step.
    [entered] = step(flow, "0", 1, 3)["input"]
    assert entered["queue"] == "next-step" and entered["source"] == "subagent-settled"
    assert entered["from"] == "S2" and entered["stopReason"] == "completed"
    assert last_line(entered["text"]) == "CHILD_RESULT"
    assert step(flow, "0", 1, 3)["output"]["text"] == "PARENT_RECEIVED_CHILD_RESULT"
    # Root tool calls are exactly [subagent], without run_in_background.
    calls = tool_calls(flow, "0")
    assert [c["name"] for c in calls] == ["subagent"]
    assert "run_in_background" not in calls[0]["arguments"]
    # The child never calls report.
    assert tool_calls(flow, "0.1") == []
    # Exactly one subagent-settled insert, carrying CHILD_RESULT, inserted after S1 and claimed by S3.
    assert flow["notices"] == [{
        "id": entered["id"], "kind": "subagent-settled", "from": "S2", "to": "S1", "stopReason": "completed",
        "queue": "next-step", "insertedAt": {"turn": 1, "lastStep": 1}, "claimedAt": {"turn": 1, "step": 3},
    }]
    assert "CHILD_RESULT" in entered["text"]


async def test_a_background_settlement_timeline_inserts_the_notice_before_root_step_2_starts(tmp_path: Path) -> None:
    tl = await run_timeline("background-settlement", tmp_path)
    step1_end = tl.index("root", "step/end", turn=1, step=1)
    step2_start = tl.index("root", "step/start", turn=1, step=2)
    [notice] = [i for i, e in enumerate(tl.entries) if e.agent == "root" and e.is_insert("subagent-settled")]
    assert step1_end < notice < step2_start
    assert tl.entries[notice].data["target"] == "next-step"


def test_a_background_settlement_cli_run_prints_the_answer_and_nothing_on_stderr(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--transcript", "background-settlement", "--home", str(tmp_path)])
    assert (result.exit_code, result.stdout, result.stderr) == (0, "PARENT_RECEIVED_CHILD_RESULT\n", "")


# -- (b) ---------------------------------------------------------------------------------------
def test_b_notice_new_turn_opens_root_turn_2(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("notice-new-turn")
    assert flow == flow_snapshot
    common_facts(flow, "SUBAGENT_SETTLED_NOTED")

    assert turn(flow, "0", 1)["end"] == {"kind": "completed"}
    assert step(flow, "0", 1, 2)["output"] == {"text": "STARTED", "finish": "stop"}
    assert [t["turn"] for t in session(flow, "0")["turns"]] == [1, 2]
    [entered] = step(flow, "0", 2, 1)["input"]
    assert (entered["queue"], entered["source"], entered["from"], entered["stopReason"]) == (
        "next-turn", "subagent-settled", "S2", "completed")
    assert last_line(entered["text"]) == "CHILD_OK"
    assert [(n["kind"], n["stopReason"], n["queue"], n["insertedAt"], n["claimedAt"]) for n in flow["notices"]] == [
        ("subagent-settled", "completed", "next-turn", "idle", {"turn": 2, "step": 1})]
    assert step(flow, "0", 2, 1)["output"]["text"] == "SUBAGENT_SETTLED_NOTED"


# -- (c) ---------------------------------------------------------------------------------------
def test_c_report_then_settle_overlay_makes_the_report_quiet() -> None:
    """The transcript's `overlays: [quiet-reports]` reaches the composed configuration."""
    composed = compose(profile="test", transcript=load_transcript("report-then-settle"), environ={})
    assert composed.config.subagents.report_delivery == "quiet"
    assert composed.provenance["subagents.reportDelivery"].startswith("overlays/quiet-reports.yaml")


def test_c_report_then_settle_notice_is_the_only_wake(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("report-then-settle")
    assert flow == flow_snapshot
    common_facts(flow, "SUBAGENT_SETTLED_NOTED")

    # The child reported, then answered `Reported.`.
    assert [c["name"] for c in tool_calls(flow, "0.1")] == ["report"]
    assert tool_calls(flow, "0.1")[0]["arguments"] == {"output": "CHILD_REPORT_OK"}
    # Report (quiet: next-step, into the idle root, no turn), then the notice (next-turn): both idle.
    report, notice = flow["notices"]
    assert (report["kind"], report["queue"], report["insertedAt"]) == ("subagent-report", "next-step", "idle")
    assert (notice["kind"], notice["queue"], notice["insertedAt"]) == ("subagent-settled", "next-turn", "idle")
    assert notice["stopReason"] == "completed"
    # The notice is the only wake: exactly one more root turn, whose S1 enters [report, notice] in order.
    assert [t["turn"] for t in session(flow, "0")["turns"]] == [1, 2]
    assert [s["step"] for s in turn(flow, "0", 2)["steps"]] == [1]
    entered = step(flow, "0", 2, 1)["input"]
    assert [(e["id"], e["queue"], e["source"]) for e in entered] == [
        (report["id"], "next-step", "subagent-report"), (notice["id"], "next-turn", "subagent-settled")]
    assert last_line(entered[0]["text"]) == "CHILD_REPORT_OK"
    assert last_line(entered[1]["text"]) == "Reported."
    assert report["claimedAt"] == notice["claimedAt"] == {"turn": 2, "step": 1}


async def test_c_report_then_settle_timeline_report_opens_no_turn(tmp_path: Path) -> None:
    tl = await run_timeline("report-then-settle", tmp_path)
    root_t1_end = tl.index("root", "turn/end", turn=1)
    [report] = [i for i, e in enumerate(tl.entries) if e.agent == "root" and e.is_insert("subagent-report")]
    [notice] = [i for i, e in enumerate(tl.entries) if e.agent == "root" and e.is_insert("subagent-settled")]
    root_t2_start = tl.index("root", "turn/start", turn=2)
    assert root_t1_end < report < notice < root_t2_start
    assert not [e for e in tl.between(report, notice) if e.agent == "root" and e.type == "turn/start"]
    assert notice + 1 == root_t2_start  # the notice's own wake opens the turn (span S1)


# -- (d) ---------------------------------------------------------------------------------------
def test_d_followups_checkpoint_failure_claims_third_but_never_runs_it(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("followups-checkpoint-failure")
    assert flow == flow_snapshot
    common_facts(flow, "SUBAGENT_SETTLED_NOTED")

    worker = session(flow, "0.1")
    assert [t["turn"] for t in worker["turns"]] == [1, 2, 3]
    [prompt] = step(flow, "0.1", 1, 1)["input"]
    assert (prompt["source"], prompt["text"]) == ("user", "Reply with CHILD_OK.")
    assert step(flow, "0.1", 1, 1)["output"]["text"] == "CHILD_OK"
    [second] = step(flow, "0.1", 2, 1)["input"]
    assert (second["source"], second["from"], second["text"]) == ("coordinator", "S1", "SECOND")
    assert step(flow, "0.1", 2, 1)["output"]["text"] == "SECOND_OK"
    third = turn(flow, "0.1", 3)
    assert third["steps"] == []
    assert [(e["source"], e["text"]) for e in third["claimedUnrun"]] == [("coordinator", "THIRD")]
    assert third["end"] == {"kind": "error", "code": "CHECKPOINT_FAILED", "message": "simulated checkpoint failure"}
    # The notice reads `error` with the last output SECOND_OK and opens root T2.
    [notice] = flow["notices"]
    assert (notice["stopReason"], notice["queue"], notice["insertedAt"], notice["claimedAt"]) == (
        "error", "next-turn", "idle", {"turn": 2, "step": 1})
    [entered] = step(flow, "0", 2, 1)["input"]
    assert entered["id"] == notice["id"] and last_line(entered["text"]) == "SECOND_OK"
    assert turn(flow, "0", 1)["end"] == {"kind": "completed"}


# -- (e) ---------------------------------------------------------------------------------------
def test_e_interrupt_parked_resume_runs_b_c_d_in_fifo_order(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("interrupt-parked-resume")
    assert flow == flow_snapshot
    common_facts(flow, "CHILD_RESUMED_OK")

    worker = session(flow, "0.1")
    assert [t["turn"] for t in worker["turns"]] == [1, 2, 3, 4]
    t1 = turn(flow, "0.1", 1)
    assert [s["output"] for s in t1["steps"]] == [{"text": "partial", "interrupted": True}]
    assert t1["end"] == {"kind": "aborted", "cause": "parent"}
    for number, message, answer in [(2, "B", "B_OK"), (3, "C", "C_OK"), (4, "D", "D_OK")]:
        [entered] = step(flow, "0.1", number, 1)["input"]
        assert (entered["source"], entered["from"], entered["text"]) == ("coordinator", "S1", message)
        assert step(flow, "0.1", number, 1)["output"] == {"text": answer, "finish": "stop"}
        assert turn(flow, "0.1", number)["end"] == {"kind": "completed"}
    assert [c["name"] for c in tool_calls(flow, "0")] == [
        "subagent", "send_message", "send_message", "interrupt_agent", "send_message"]
    # One notice (completed, D_OK), after the root's T1, opening root T2.
    [notice] = flow["notices"]
    assert (notice["stopReason"], notice["queue"], notice["insertedAt"], notice["claimedAt"]) == (
        "completed", "next-turn", "idle", {"turn": 2, "step": 1})
    [entered] = step(flow, "0", 2, 1)["input"]
    assert entered["id"] == notice["id"] and last_line(entered["text"]) == "D_OK"
    assert turn(flow, "0", 1)["end"] == {"kind": "completed"}


async def test_e_interrupt_parked_resume_timeline_b_and_c_stay_parked_until_d(tmp_path: Path) -> None:
    tl = await run_timeline("interrupt-parked-resume", tmp_path)
    interrupted = tl.index("root", "tool/result", callId="stop-worker")
    worker_t1_end = tl.index("worker", "turn/end", turn=1)
    [d_insert] = [i for i, e in enumerate(tl.entries)
                  if e.agent == "worker" and e.is_insert("coordinator") and e.texts() == ["D"]]
    assert worker_t1_end < d_insert
    # Parked: between the interrupt and D the worker makes no request and opens no turn.
    gap = tl.between(min(interrupted, worker_t1_end), d_insert)
    assert not [e for e in gap if e.agent == "worker" and (e.kind == "request" or e.type == "turn/start")]
    assert tl.index("worker", "turn/start", turn=2) == d_insert + 1  # D's send resumes it (FIFO: B first)
    assert [e.type for _, e in tl.requests("worker")] == ["1.1", "2.1", "3.1", "4.1"]
    # The notice comes after the root's T1 and opens root T2.
    [notice] = [i for i, e in enumerate(tl.entries) if e.agent == "root" and e.is_insert("subagent-settled")]
    assert tl.index("root", "turn/end", turn=1) < notice and tl.index("root", "turn/start", turn=2) == notice + 1


# -- (f) ---------------------------------------------------------------------------------------
def test_f_four_children_one_step_root_s3_enters_all_four_notices(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("four-children-one-step")
    assert flow == flow_snapshot
    common_facts(flow, "ALL_FOUR_RECEIVED")

    children = ["0.1", "0.2", "0.3", "0.4"]
    assert [(session(flow, p)["id"], session(flow, p)["spawnCall"]) for p in children] == [
        ("S2", "c1"), ("S3", "c2"), ("S4", "c3"), ("S5", "c4")]
    for i, p in enumerate(children, start=1):
        assert step(flow, p, 1, 1)["output"] == {"text": f"W{i}_DONE", "finish": "stop"}
    # No extra root turn; S2 enters nothing; S3 enters all four, from next-step, in order S2…S5.
    assert [t["turn"] for t in session(flow, "0")["turns"]] == [1]
    assert [s["step"] for s in turn(flow, "0", 1)["steps"]] == [1, 2, 3]
    assert step(flow, "0", 1, 2)["input"] == []
    entered = step(flow, "0", 1, 3)["input"]
    assert [(e["queue"], e["source"], e["from"], e["stopReason"]) for e in entered] == [
        ("next-step", "subagent-settled", sid, "completed") for sid in ["S2", "S3", "S4", "S5"]]
    assert [last_line(e["text"]) for e in entered] == ["W1_DONE", "W2_DONE", "W3_DONE", "W4_DONE"]
    assert [(n["from"], n["queue"], n["insertedAt"], n["claimedAt"]) for n in flow["notices"]] == [
        (sid, "next-step", {"turn": 1, "lastStep": 1}, {"turn": 1, "step": 3}) for sid in ["S2", "S3", "S4", "S5"]]


async def test_f_four_children_one_step_timeline_no_child_requests_before_root_s2_claims(tmp_path: Path) -> None:
    tl = await run_timeline("four-children-one-step", tmp_path)
    root_s1_end = tl.index("root", "step/end", turn=1, step=1)
    root_s2_start = tl.index("root", "step/start", turn=1, step=2)
    child_requests = [(i, e.agent) for i, e in tl.requests() if e.agent != "root"]
    assert [agent for _, agent in child_requests] == ["w1", "w2", "w3", "w4"]  # settlement order
    assert root_s1_end < child_requests[0][0]  # nothing before root S2's (empty) claim
    notices = [i for i, e in enumerate(tl.entries) if e.agent == "root" and e.is_insert("subagent-settled")]
    assert len(notices) == 4 and max(notices) < root_s2_start
    assert all(tl.entries[i].data["target"] == "next-step" for i in notices)


# -- (g) ---------------------------------------------------------------------------------------
def test_g_child_max_tokens_notice_reads_max_tokens_with_the_partial_output(dsh_flow: Any, flow_snapshot: Any) -> None:
    flow = dsh_flow("child-max-tokens")
    assert flow == flow_snapshot
    common_facts(flow, "NOTED_PARTIAL")  # the root completed: exit 0

    child = turn(flow, "0.1", 1)
    assert [s["output"] for s in child["steps"]] == [{"text": "half an ans", "finish": "max-tokens"}]
    assert child["end"] == {"kind": "max-tokens"}
    [notice] = flow["notices"]
    assert (notice["stopReason"], notice["queue"], notice["insertedAt"], notice["claimedAt"]) == (
        "max-tokens", "next-turn", "idle", {"turn": 2, "step": 1})
    [entered] = step(flow, "0", 2, 1)["input"]
    assert entered["id"] == notice["id"] and last_line(entered["text"]) == "half an ans"
    assert turn(flow, "0", 1)["end"] == {"kind": "completed"}


# -- item 114, second half ---------------------------------------------------------------------
@pytest.mark.parametrize("name", SCENARIOS)
def test_m114_dsh_flow_prints_the_same_yaml_as_the_fixture(name: str, dsh_flow: Any) -> None:
    """Matrix 114: `dsh flow` prints the identical YAML the snapshot stores."""
    result = CliRunner().invoke(app, ["flow", name])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == dsh_flow(name).yaml
