"""`dsh interrupt` and `dsh send` (SPEC §18.4, §19, §22; matrix 107): route an address to the live
run's control socket and print one of the §19 texts.

Error rows run in-process over a home a finished replay run left behind (no socket answers there).
The end-to-end test uses two real processes: a `dsh run --json` whose child hangs with a follow-up
queued behind it, and a `dsh interrupt` started once the NDJSON stream shows that state.
"""

from __future__ import annotations

import json

import pytest
from cli_kit import first_child, hold_until_hang, log_events, run_dsh, spawn, texts_of, transcript

from dsh.loader.texts import render

STRANGER = "session-00000000-0000-4000-8000-000000000000"  # a valid id with no session file


@pytest.fixture
def finished(dsh, home):
    """A home holding one finished tree: `(root, child)`; no run serves it any more."""
    result = dsh("run", "--json", "--transcript", "background-settlement", "--home", home)
    assert result.exit_code == 0, result.stderr
    start = next(r for r in map(json.loads, result.stdout.splitlines())
                 if r["type"] == "lifecycle" and r["name"] == "subagent/start")
    return start["parentSessionId"], start["sessionId"]


@pytest.mark.parametrize("command", ["interrupt", "send"])
@pytest.mark.parametrize("address", [
    pytest.param("no-slash", id="no-slash"),
    pytest.param("a/", id="empty-child"),
    pytest.param("/b", id="empty-parent"),
    pytest.param("a/b/c", id="three-parts"),
    pytest.param("a b/c", id="space"),
])
def test_m107_bad_address_exits_2(dsh, home, command, address):
    """Matrix 107: an address that is not `<valid id>/<valid id>` → T-CLI-BAD-ADDRESS, exit 2."""
    extra = ["hello"] if command == "send" else []
    result = dsh(command, address, *extra, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-BAD-ADDRESS", value=address) + "\n"


@pytest.mark.parametrize("command", ["interrupt", "send"])
def test_unknown_sessions_exit_2(dsh, home, command):
    """Neither the child nor the parent has a file: T-CLI-UNKNOWN-SESSION names the child."""
    extra = ["hello"] if command == "send" else []
    result = dsh(command, f"{STRANGER}/child-1", *extra, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id="child-1", home=home) + "\n"


def test_m107_interrupt_without_a_live_run_is_an_accepted_no_op(dsh, home, finished):
    """Matrix 107: the address routes to a root whose run has ended → T-CLI-NO-RUN on stdout, exit 0;
    the logs are untouched."""
    root, child = finished
    before = {sid: (home / "sessions" / sid / "session.jsonl").read_bytes() for sid in (root, child)}

    result = dsh("interrupt", f"{root}/{child}", "--home", home)

    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout == render("T-CLI-NO-RUN", child=child) + "\n"
    assert before == {sid: (home / "sessions" / sid / "session.jsonl").read_bytes() for sid in (root, child)}


def test_send_without_a_live_run_fails_with_exit_1(dsh, home, finished):
    """§19: follow-ups need a live run → T-CLI-SEND-NO-RUN, exit 1; nothing is written."""
    root, child = finished
    before = (home / "sessions" / child / "session.jsonl").read_bytes()

    result = dsh("send", f"{root}/{child}", "more work", "--home", home)

    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == "dsh: " + render("T-CLI-SEND-NO-RUN", child=child) + "\n"
    assert (home / "sessions" / child / "session.jsonl").read_bytes() == before


@pytest.mark.parametrize("command", ["interrupt", "send"])
def test_an_unknown_child_of_a_saved_parent_exits_2(dsh, home, finished, command):
    """Issue 15 item 4 (supersedes §18.4's route-through-the-parent for the CLI): a child with no
    saved header is "no session X", exit 2, even when the parent exists; nothing is sent."""
    root, _child = finished
    extra = ["hello"] if command == "send" else []

    result = dsh(command, f"{root}/not-a-child", *extra, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id="not-a-child", home=home) + "\n"


@pytest.mark.parametrize("command", ["interrupt", "send"])
@pytest.mark.parametrize("shape", ["stranger/child", "root/root", "child/root", "child/child"])
def test_an_address_the_saved_headers_do_not_support_exits_2(dsh, home, finished, command, shape):
    """Issue 15 items 4, 6: the child's header must name the given parent; `<root>/<root>` and
    `<child>/<root>` used to answer "interrupt accepted" with exit 0. The logs are untouched."""
    root, child = finished
    ids = {"stranger": STRANGER, "root": root, "child": child}
    parent_key, child_key = shape.split("/")
    parent_id, child_id = ids[parent_key], ids[child_key]
    extra = ["hello"] if command == "send" else []
    before = {sid: (home / "sessions" / sid / "session.jsonl").read_bytes() for sid in (root, child)}

    result = dsh(command, f"{parent_id}/{child_id}", *extra, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-UNAUTHORIZED", child=child_id, parent=parent_id) + "\n"
    assert before == {sid: (home / "sessions" / sid / "session.jsonl").read_bytes() for sid in (root, child)}


@pytest.mark.parametrize("command", ["interrupt", "send"])
@pytest.mark.parametrize("address", [
    pytest.param("a/" + "b" * 300, id="child-300-bytes"),
    pytest.param("a/..", id="dotdot"),
    pytest.param("a/b..c", id="inner-dotdot"),
    pytest.param("a/.hidden", id="leading-dot"),
    pytest.param("a/b\n", id="trailing-newline"),
])
def test_the_one_validator_refuses_ids_an_address_could_smuggle(dsh, home, command, address):
    extra = ["hello"] if command == "send" else []
    result = dsh(command, address, *extra, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-BAD-ADDRESS", value=address) + "\n"


# -- two processes ---------------------------------------------------------------------------------

PARKED_FOLLOWUP = {
    "root": {"replies": [
        spawn("start-worker", label="worker", prompt="Work on the long task."),
        {"toolCalls": [{"id": "queue-more", "name": "send_message",
                        "arguments": {"agent_id": "{{child:start-worker}}", "message": "FOLLOW_UP"}}]},
        {"text": "ROOT_DONE"},
    ]},
    "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}]},
}


def test_m107_interrupt_from_a_second_process_stops_the_child_and_keeps_its_queue(live_run, home, tmp_path):
    """Matrix 107 end to end: `dsh interrupt` with the wrong parent is refused (exit 2 since issue 15,
    T-CLI-UNAUTHORIZED); with the right one it stops the hanging child's turn (exit 0,
    T-CLI-INTERRUPTED).

    The follow-up the root queued while the child's turn 1 was running is never claimed: a waking send
    accepted before the abort does not latch (§6.3, §10.3), so the interrupted child parks with it
    queued. No one resumes it, the run is STALLED, and a transcript run forces `run.parked: release`
    (§17.2): the release discards the follow-up as a canceled splice and the child settles `aborted`.
    The root's answer is unaffected: exit 0, `ROOT_DONE`."""
    script = transcript(tmp_path, "parked-followup", PARKED_FOLLOWUP, fences=hold_until_hang("worker"))
    run = live_run("--transcript", script, "--home", home)
    root, child = first_child(run)
    run.wait_event(child, "turn/start", turn=1)
    run.wait_event(child, "step/start", turn=1, step=1)
    run.wait_event(child, "user/message")  # the prompt entered the step: next is the hanging request
    queued = run.wait_for(
        lambda r: r["type"] == "event" and r["sessionId"] == child and r["event"]["type"] == "agent/inbox/spliced"
        and any(texts_of(m) == ["FOLLOW_UP"] for m in r["event"]["data"]["inserted"]), "the queued follow-up")
    run.wait_event(root, "turn/end", turn=1)  # the fence: the child's hang was reached before root step 2

    wrong = run_dsh("interrupt", f"{STRANGER}/{child}", "--home", home)
    assert (wrong.returncode, wrong.stdout) == (2, "")  # the saved headers refuse it (issue 15 item 4)
    assert wrong.stderr == "dsh: " + render("T-CLI-UNAUTHORIZED", child=child, parent=STRANGER) + "\n"

    right = run_dsh("interrupt", f"{root}/{child}", "--home", home)
    assert (right.returncode, right.stderr) == (0, "")
    assert right.stdout == render("T-CLI-INTERRUPTED", child=child) + "\n"

    assert run.finish() == 0
    # Issue 16: a run that released parked work says so on stderr (the result lists `released`).
    assert run.stderr.decode() == render("T-CLI-RELEASED", ids=child) + "\n"
    final = run.records[-1]
    assert (final["type"], final["exitCode"], final["output"], final["violations"]) == ("result", 0, "ROOT_DONE", [])
    assert final["released"] == [child]
    assert final["subagents"][0]["lastStopReason"] == "aborted"

    events = log_events(home, child)
    kinds = [e["type"] for e in events]
    (end,) = [e for e in events if e["type"] == "turn/end"]
    assert end["data"] == {"turn": 1, "reason": {"kind": "aborted", "reason": {"kind": "user"}}}
    assert kinds.count("turn/start") == 1
    # Queued during turn 1 (next-turn), never claimed, removed by the release after the turn ended.
    insert = queued["event"]
    assert insert["data"]["target"] == "next-turn"
    assert events[kinds.index("turn/start")]["seq"] < insert["seq"] < end["seq"]
    follow_up_id = insert["data"]["inserted"][0]["id"]
    assert not any(e["type"] == "user/message" and e["data"]["id"] == follow_up_id for e in events)
    removals = [e for e in events if e["type"] == "agent/inbox/spliced" and e["data"].get("removedCount")]
    canceled = [e for e in removals if e["data"].get("outcome") == "canceled"]
    assert [(e["data"]["target"], e["data"]["removedCount"]) for e in canceled] == [("next-turn", 1)]
    assert canceled[0]["seq"] > end["seq"]
    # The child's partial reply was logged as interrupted; the root heard of the settlement only by
    # an injected notice (no new root turn).
    partial = [e for e in events if e["type"] == "assistant/message"]
    assert [(texts_of(e), e["data"].get("interrupted")) for e in partial] == [(["partial"], True)]
    root_events = log_events(home, root)
    assert [e["data"]["turn"] for e in root_events if e["type"] == "turn/start"] == [1]
    notices = [(e["data"]["target"], m["source"]) for e in root_events if e["type"] == "agent/inbox/spliced"
               for m in e["data"]["inserted"] if m["source"]["kind"] == "subagent-settled"]
    assert [(target, src["senderSessionId"], src["stopReason"]) for target, src in notices] == [
        ("next-step", child, "aborted")]
