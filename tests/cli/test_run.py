"""`dsh run` (SPEC §17, §19, §22): what stdout, stderr and the exit code say for each way a run ends.

§17.3 gives each stream a meaning, so every test asserts `exit_code`, `stdout` and `stderr` apart:
stdout carries only the answer (or NDJSON with `--json`), stderr carries warnings and errors (progress
only on a TTY, which `CliRunner` is not). Runs are keyless replays under the `test` profile; the only
subprocess tests are the ones that need a signal or a second process holding a session.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cli_kit import (
    DSH,
    HANGING_CHILD,
    EXIT_BACKSTOP,
    LINE_BACKSTOP,
    hold_until_hang,
    log_events,
    run_dsh,
    send_two_signals,
    spawn,
    start_hanging_child,
    subprocess_env,
    texts_of,
    transcript,
    write_yaml,
)

from dsh.loader.session import SessionStore, read, validate_log
from dsh.loader.texts import TEXTS, render

SHIPPED = Path(__file__).resolve().parents[2] / "transcripts"


def ndjson(stdout: str) -> list[dict[str, Any]]:
    assert stdout.endswith("\n"), "NDJSON output ends with a newline"
    return [json.loads(line) for line in stdout.splitlines()]


def session_ids(home: Path) -> set[str]:
    return {p.parent.name for p in (home / "sessions").glob("*/session.jsonl")}


# -- the answer on stdout ---------------------------------------------------------------------------

def test_m101_transcript_run_prints_only_the_answer_and_exits_0(dsh, home):
    """Matrix 101: stdout is the answer and a newline; stderr is empty when it is not a TTY."""
    result = dsh("run", "--transcript", "background-settlement", "--home", home)

    assert result.exit_code == 0
    assert result.stdout == "PARENT_RECEIVED_CHILD_RESULT\n"
    assert result.stderr == ""
    assert len(session_ids(home)) == 2


def test_m102_json_output_is_ndjson_with_every_event_of_both_sessions_and_one_final_result(dsh, home):
    """Matrix 102: only NDJSON; each session's event records equal its log, in append order; the
    child's lifecycle edges; exactly one `result` record, last, whose exitCode is the exit code."""
    result = dsh("run", "--json", "--transcript", "background-settlement", "--home", home)

    assert result.stderr == ""
    records = ndjson(result.stdout)
    assert {r["type"] for r in records} == {"init", "event", "lifecycle", "result"}
    assert records[0]["type"] == "init" and [r["type"] for r in records].count("init") == 1  # issue 16
    results = [r for r in records if r["type"] == "result"]
    assert len(results) == 1 and records[-1] is results[0]
    final = results[0]
    assert final["exitCode"] == result.exit_code == 0
    assert final["output"] == "PARENT_RECEIVED_CHILD_RESULT"
    assert (final["stopReason"], final["violations"], final["timedOut"], final["interrupted"]) == ("completed", [], False, False)

    root = final["rootSessionId"]
    (child,) = session_ids(home) - {root}
    for sid in (root, child):
        streamed = [r["event"] for r in records if r["type"] == "event" and r["sessionId"] == sid]
        assert streamed == log_events(home, sid), f"events of {sid} differ from its log"
    lifecycle = [r for r in records if r["type"] == "lifecycle"]
    assert [(r["name"], r["sessionId"], r["parentSessionId"], r["epoch"]) for r in lifecycle] == [
        ("subagent/start", child, root, 1),
        ("subagent/end", child, root, 1),
    ]
    assert lifecycle[1]["stopReason"] == "completed"
    assert final["subagents"] == [{"sessionId": child, "parentSessionId": root, "label": "answer child",
                                   "epochs": 1, "lastStopReason": "completed", "numTurns": 1,
                                   "usage": {"inputTokens": 10, "outputTokens": 5, "cacheReadTokens": 0}}]


# -- exit codes from the root's stop reason ----------------------------------------------------------

ROOT_ERROR = {"root": {"replies": [{"error": {"code": "BOOM", "message": "it broke"}}]}}
ROOT_MAX_TOKENS = {"root": {"replies": [{"text": "half an ans", "finish": "max-tokens"}]}}


@pytest.mark.parametrize(("agents", "exit_code", "stdout", "stderr"), [
    # Issue 11 item 5 supersedes §17.3's "just \n when empty" for a failed root: no stray newline.
    pytest.param(ROOT_ERROR, 1, "", "dsh: root turn failed [BOOM]: it broke\n", id="m103-error"),
    pytest.param(ROOT_MAX_TOKENS, 3, "half an ans\n", "", id="m103-max-tokens"),
])
def test_m103_root_stop_reason_sets_the_exit_code(dsh, home, tmp_path, agents, exit_code, stdout, stderr):
    """Matrix 103: `error` → 1 with the root-error line on stderr; `max-tokens` → 3 with the cut answer."""
    script = transcript(tmp_path, "root-end", agents)

    result = dsh("run", "--transcript", script, "--home", home)

    assert (result.exit_code, result.stdout, result.stderr) == (exit_code, stdout, stderr)


@pytest.mark.parametrize("agents", [pytest.param(ROOT_ERROR, id="m102-error"), pytest.param(ROOT_MAX_TOKENS, id="m102-max-tokens")])
def test_m102_json_result_exit_code_matches_a_nonzero_exit(dsh, home, tmp_path, agents):
    result = dsh("run", "--json", "--transcript", transcript(tmp_path, "root-end", agents), "--home", home)

    final = ndjson(result.stdout)[-1]
    assert final["type"] == "result"
    assert final["exitCode"] == result.exit_code != 0


def test_m103_timeout_aborts_the_root_and_exits_4(dsh, home, tmp_path):
    """Matrix 103 (aborted): `--timeout` prints T-CLI-TIMEOUT, cancels the hanging root with cause
    `user` and reports `timedOut`; the output is still the last logged root message (§7.4), here the
    interrupted partial message whenever the hang was reached before the limit."""
    script = transcript(tmp_path, "root-hang", {"root": {"replies": [{"hang": {"text": "partial"}}]}})

    result = dsh("run", "--json", "--timeout", "0.3", "--transcript", script, "--home", home)

    assert result.exit_code == 4
    assert result.stderr == render("T-CLI-TIMEOUT", seconds="0.3") + "\n"
    final = ndjson(result.stdout)[-1]
    assert (final["type"], final["stopReason"], final["exitCode"], final["timedOut"], final["interrupted"]) == (
        "result", "aborted", 4, True, False)
    events = log_events(home, final["rootSessionId"])
    assert events[-1]["type"] == "turn/end"
    assert events[-1]["data"]["reason"] == {"kind": "aborted", "reason": {"kind": "user"}}
    said = [texts_of(e) for e in events if e["type"] == "assistant/message"]
    assert final["output"] == ("".join(said[-1]) if said else "")


async def test_m103_pre_step_hook_refusal_exits_5(home, tmp_path):
    """Matrix 103 (refusal): a pre-step hook rejecting the root's first step ends the turn `blocked`,
    which the run reports as `refusal`, exit 5. A transcript cannot express a hook, so the test adds
    one through `RunRequest.agent_hooks`, the runner's seam for observing or gating its agents."""
    from dsh.loader.agent import Agent, PreStep
    from dsh.loader.headless import RunRequest, run_tree
    from dsh.loader.transcripts import load_transcript

    script = load_transcript(transcript(tmp_path, "refused", {"root": {"replies": []}}))
    seen: list[int] = []

    def refuse(agent: Agent) -> None:
        async def reject(ctx: PreStep) -> str:
            seen.append(ctx.step)
            return "reject"

        agent.pre_step.add(reject)

    result = await run_tree(RunRequest(home=home, transcript=script, agent_hooks=[refuse]))

    assert seen == [1]
    assert (result.stop_reason, result.exit_code, result.violations) == ("refusal", 5, [])
    assert log_events(home, result.root_session_id)[-1]["data"]["reason"] == {"kind": "blocked"}


def test_m88_transcript_violation_exits_1_and_is_reported_once(home, tmp_path):
    """Matrix 88 (CLI half): a reply left unused is `REPLAY_UNCONSUMED`; the root completed, yet the
    run exits 1, and stderr carries the violation exactly once. A subprocess, because only there
    does an unconfigured library logger reach stderr (pytest captures logging in-process)."""
    script = transcript(tmp_path, "one-too-many", {"root": {"replies": [{"text": "A"}, {"text": "B"}]}})

    done = run_dsh("run", "--transcript", script, "--home", home)

    assert (done.returncode, done.stdout) == (1, "A\n")
    assert done.stderr == "dsh: REPLAY_UNCONSUMED [root]: agent root consumed 1/2 replies\n"


# -- quiescence: the run outlives the root's first turn ---------------------------------------------

def test_m104_idle_root_with_a_resident_child_keeps_the_run_alive_until_the_notice_turn(dsh, home):
    """Matrix 104: root turn 1 ends while the child is held; the run waits, the child settles, and the
    notice opens root turn 2, whose reply is the answer."""
    result = dsh("run", "--json", "--transcript", "notice-new-turn", "--home", home)

    assert (result.exit_code, result.stderr) == (0, "")
    records = ndjson(result.stdout)
    final = records[-1]
    assert final["output"] == "SUBAGENT_SETTLED_NOTED"
    root = final["rootSessionId"]

    def index(pred: Any) -> int:
        return next(i for i, r in enumerate(records) if pred(r))

    def root_event(kind: str, turn: int) -> Any:
        return lambda r: (r["type"] == "event" and r["sessionId"] == root and r["event"]["type"] == kind
                          and r["event"]["data"].get("turn") == turn)

    (child,) = session_ids(home) - {root}
    end_1 = index(root_event("turn/end", 1))
    child_step = index(lambda r: r["type"] == "event" and r["sessionId"] == child and r["event"]["type"] == "step/start")
    notice = index(lambda r: r["type"] == "event" and r["sessionId"] == root and r["event"]["type"] == "agent/inbox/spliced"
                   and [m["source"]["kind"] for m in r["event"]["data"]["inserted"]] == ["subagent-settled"])
    start_2 = index(root_event("turn/start", 2))
    assert records[end_1]["event"]["data"]["reason"] == {"kind": "completed"}
    # The root was idle with its child resident; the child ran afterwards and its notice opened turn 2.
    assert end_1 < child_step < notice < start_2
    assert records[notice]["event"]["data"]["target"] == "next-turn"
    assert [(r["name"], r["sessionId"]) for r in records if r["type"] == "lifecycle"] == [
        ("subagent/start", child), ("subagent/end", child)]
    said = [e for e in log_events(home, root) if e["type"] == "assistant/message"]
    assert texts_of(said[-2]) == ["STARTED"] and texts_of(said[-1]) == ["SUBAGENT_SETTLED_NOTED"]


# -- usage errors: nothing runs, one line on stderr --------------------------------------------------

def assert_refused(result: Any, home: Path, exit_code: int = 2) -> str:
    """Nothing ran (no session written), stdout empty, exactly one line on stderr, no traceback."""
    assert result.exit_code == exit_code, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith("dsh: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert not (home / "sessions").exists() or not session_ids(home)
    return result.stderr


@pytest.mark.parametrize("args", [
    pytest.param([], id="m106-no-task-no-transcript"),
    pytest.param(["a task", "--transcript", "background-settlement"], id="m106-task-and-transcript"),
])
def test_m106_task_xor_transcript(dsh, home, args):
    assert_refused(dsh("run", *args, "--home", home), home)


def test_malformed_overlay_yaml_names_file_line_and_column(dsh, home, tmp_path):
    overlay = tmp_path / "broken.yaml"
    overlay.write_text("subagents:\n  reportDelivery: [\n")

    line = assert_refused(dsh("run", "--transcript", "hello", "--overlay", overlay, "--home", home), home)

    assert line.startswith(f"dsh: {overlay}:3:1: ")


def test_unknown_overlay_key_names_its_own_position_and_key_path(dsh, home, tmp_path):
    overlay = write_yaml(tmp_path / "typo.yaml", {"subagents": {"maxDepth": 2, "reportDelivry": "quiet"}})

    line = assert_refused(dsh("run", "--transcript", "hello", "--overlay", overlay, "--home", home), home)

    # json.dumps(indent=1) puts `reportDelivry` on line 4, column 3.
    assert line == f"dsh: {overlay}:4:3: subagents.reportDelivry: unknown key; did you mean reportDelivery?\n"


@pytest.mark.parametrize(("option", "names"), [
    pytest.param("--profile", "default, test", id="profile"),
    pytest.param("--overlay", "deepseek-reasoner, ollama, openai, quiet-reports, vllm", id="overlay"),
    pytest.param("--transcript", ", ".join(sorted(p.stem for p in SHIPPED.glob("*.yaml"))), id="transcript"),
])
def test_unknown_shipped_name_lists_the_available_names(dsh, home, option, names):
    args = ["--transcript", "hello"] if option != "--transcript" else []
    line = assert_refused(dsh("run", *args, option, "nope", "--home", home), home)

    assert line == f"dsh: unknown {option[2:]} 'nope'; available: {names}\n"


def test_m91_fences_under_the_default_profile_are_refused(dsh, home):
    """Matrix 91 (CLI half): T-CLI-FENCES, exit 2, nothing runs."""
    line = assert_refused(
        dsh("run", "--profile", "default", "--transcript", "background-settlement", "--home", home), home)

    assert line == "dsh: " + render("T-CLI-FENCES", file=SHIPPED / "background-settlement.yaml") + "\n"


def test_missing_api_key_names_the_variable_never_a_value(dsh, home, tmp_path):
    """§22: the default profile needs `DEEPSEEK_API_KEY`; unset, the run stops before any request."""
    line = assert_refused(dsh("run", "a task", "--home", home, env={"DEEPSEEK_API_KEY": None}), home)
    assert "DEEPSEEK_API_KEY" in line

    # With another variable configured, the error names that one; the set key's value never shows.
    overlay = write_yaml(tmp_path / "key.yaml", {"model": {"apiKeyEnv": "DSH_TEST_OTHER_KEY"}})
    line = assert_refused(
        dsh("run", "a task", "--overlay", overlay, "--home", home, env={"DEEPSEEK_API_KEY": "sk-do-not-print"}), home)
    assert "DSH_TEST_OTHER_KEY" in line and "sk-do-not-print" not in line


def test_resume_of_a_session_another_run_holds_is_session_busy(live_run, home, tmp_path):
    """§22: `--resume` of a root another live run holds → SESSION_BUSY, exit 1, one line; nothing of
    the refused run reaches the file: at the end the root log is exactly what the holder streamed."""
    script = transcript(tmp_path, "root-hang", {"root": {"replies": [{"hang": {}}]}})
    holder = live_run("--transcript", script, "--home", home)
    root = holder.wait_for(lambda r: r["type"] == "event" and r["event"]["type"] == "user/message", "root input")["sessionId"]

    busy = run_dsh("run", "go on", "--resume", root, "--home", home,
                   env={"DEEPSEEK_API_KEY": "k-test", "DSH_MODEL__BASE_URL": "http://127.0.0.1:9"})

    assert busy.returncode == 1
    assert busy.stdout == ""
    assert busy.stderr.count("\n") == 1 and "[SESSION_BUSY]" in busy.stderr, busy.stderr
    assert "Traceback" not in busy.stderr
    holder.signal(signal.SIGINT)
    assert holder.finish() == 130
    streamed = [r["event"] for r in holder.records if r["type"] == "event" and r["sessionId"] == root]
    assert log_events(home, root) == streamed
    assert session_ids(home) == {root}


# -- signals ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("signum", "exit_code"), [
    pytest.param(signal.SIGINT, 130, id="m105-sigint"),
    pytest.param(signal.SIGTERM, 143, id="sigterm"),
])
def test_m105_first_signal_drains_gracefully(live_run, home, tmp_path, signum, exit_code):
    """Matrix 105: SIGINT during a child turn prints T-CLI-SIGINT, shuts the tree down, exits 130
    (SIGTERM alike, 143); the result record says so, as 130 / 143 outrank the stop reason (§17.3);
    every session loads without repair."""
    run, root, child = start_hanging_child(live_run, home, tmp_path)

    run.signal(signum)

    assert run.finish() == exit_code
    assert run.stderr.decode() == TEXTS["T-CLI-SIGINT"] + "\n"
    final = run.records[-1]
    assert [r["type"] for r in run.records].count("result") == 1
    assert (final["type"], final["exitCode"], final["interrupted"], final["stopReason"]) == ("result", exit_code, True, "aborted")
    assert final["output"] == "ROOT_WAITING"
    # The root was idle (its cancel with cause `user` is a no-op); the drain of its descendants
    # cancelled the child as an ancestor does, so the child's turn reads `aborted/parent`.
    child_end = [e["data"]["reason"] for e in log_events(home, child) if e["type"] == "turn/end"]
    assert child_end == [{"kind": "aborted", "reason": {"kind": "parent"}}]
    assert {root, child} == session_ids(home)
    assert not (home / "run" / f"{root}.sock").exists()
    for sid, (before, after) in load_all(home, [root, child]).items():
        assert after == before, f"{sid} needed a repair"


def load_all(home: Path, ids: list[str]) -> dict[str, tuple[bytes, bytes]]:
    """Cold-load each session (§5.6: check, lock, repair) and close it: `{id: (bytes before, after)}`."""
    import asyncio

    async def load() -> dict[str, tuple[bytes, bytes]]:
        store = SessionStore(home, batch_delay_ms=0, fsync=False)
        seen = {}
        for sid in ids:
            path = home / "sessions" / sid / "session.jsonl"
            before = path.read_bytes()
            session = await store.load(sid)
            validate_log(session.events)
            await store.close(session)
            seen[sid] = (before, path.read_bytes())
        return seen

    return asyncio.run(load())


def test_m105_second_sigint_exits_130_at_once_and_the_next_load_repairs(live_run, home, tmp_path):
    """Matrix 105: a second SIGINT during the graceful shutdown → `os._exit(130)`, no result record;
    the hanging child's turn is left open in its log, and `SessionStore.load` repairs it by appending
    closers only.

    Two SIGINTs sent back to back coalesce in the kernel whenever the first is still pending, and a
    first one handled alone finishes its shutdown in milliseconds, so `send_two_signals` queues both
    while the process is stopped, in two pending sets: both reach the loop before the shutdown runs."""
    run, root, child = start_hanging_child(live_run, home, tmp_path)

    send_two_signals(run.proc.pid, signal.SIGINT)

    assert run.finish() == 130
    assert run.stderr.decode() == TEXTS["T-CLI-SIGINT"] + "\n"
    assert "result" not in [r["type"] for r in run.records]
    child_log = home / "sessions" / child / "session.jsonl"
    assert [e["type"] for e in read(child_log).events].count("turn/end") == 0, "the hanging turn was left open"

    seen = load_all(home, [root, child])
    for sid, (before, after) in seen.items():
        good = read_prefix_end(before)
        assert after[:good] == before[:good], f"{sid}: committed bytes were rewritten"
        events = read(home / "sessions" / sid / "session.jsonl")
        assert events.issue is None
        starts = sum(e["type"] == "turn/start" for e in events.events)
        ends = sum(e["type"] == "turn/end" for e in events.events)
        assert starts == ends, f"{sid}: a turn is still open after load"
    # The child was cut off inside its hanging turn: the repair closed it as `interrupted`.
    child_before, child_after = seen[child]
    assert len(child_after) > len(child_before)
    last = log_events(home, child)[-1]
    assert last["type"] == "turn/end" and last["data"]["reason"]["kind"] == "interrupted"


def read_prefix_end(raw: bytes) -> int:
    """Byte offset after the last newline: what a torn-tail repair keeps."""
    return raw.rfind(b"\n") + 1


def test_a_reader_that_closes_stdout_does_not_break_the_run(home, tmp_path):
    """`dsh run --json | head -n 3`: once the reader is gone, later records go nowhere; the run still
    shuts down cleanly with its own exit code and no traceback on stderr. The pipe is closed while
    the child hangs, so the shutdown's records are certain to meet the closed pipe."""
    script = transcript(tmp_path, "hanging-child", HANGING_CHILD, fences=hold_until_hang("worker"))
    proc = subprocess.Popen([*DSH, "run", "--json", "--transcript", str(script), "--home", str(home)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env())
    try:
        assert proc.stdout is not None and proc.stderr is not None
        fd, pending, root = proc.stdout.fileno(), b"", None
        while True:  # until the root's turn 1 ended: the child's request hangs from then on
            while b"\n" not in pending:
                ready, _, _ = select.select([fd], [], [], LINE_BACKSTOP)
                assert ready, "backstop: no record"
                chunk = os.read(fd, 65536)
                assert chunk, "dsh run ended early"
                pending += chunk
            line, pending = pending.split(b"\n", 1)
            record = json.loads(line)
            if record["type"] == "lifecycle":
                root = record["parentSessionId"]
            if record["type"] == "event" and record["sessionId"] == root and record["event"]["type"] == "turn/end":
                break
        proc.stdout.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=EXIT_BACKSTOP) == 130
        assert proc.stderr.read().decode() == TEXTS["T-CLI-SIGINT"] + "\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
