"""Every text of SPEC §12.3–§12.6 and §19, pinned byte-exact.

The literals below are copied from the spec, not from `loader.texts`, so a drift on either side
fails here. Placeholders stay as written in the spec (`{id}`, `{value!r}`, …).
"""

from __future__ import annotations

import string

import pytest

from dsh.loader.texts import TEXTS, TOOL_DESCRIPTIONS, TOOL_PARAMS, render

# §12.3 tool descriptions
SPEC_TOOL_DESCRIPTIONS = {
    "subagent": (
        "Hand a self-contained task to a new subagent that starts with an empty conversation. "
        "Unless run_in_background is false, the subagent works in the background: this call returns "
        "its id right away, and once the subagent has no work left, however it ended, the runtime "
        "adds a notice to your conversation with the outcome and the subagent's most recent output. "
        "With run_in_background set to false the call waits and returns the subagent's final output."
    ),
    "send_message": (
        "Queue another message for one of your own background subagents. It runs as a new turn after "
        "the work that subagent already has and never alters the turn in progress. A subagent that "
        "has gone idle is reloaded from its saved conversation. If the call fails, nothing was queued."
    ),
    "list_agents": (
        "Show your background subagents and their state: running; idle; parked (stopped with queued "
        "messages that wait for your next message); ready (saved and not loaded; send_message "
        "reloads it)."
    ),
    "interrupt_agent": (
        "Stop the current turn of a background subagent anywhere below you. The subagent is kept, "
        "its queued messages stay queued until you message it again, and its own subagents keep "
        "running. Stopping one that already finished does nothing."
    ),
    "report": (
        "Pass a message to your parent agent, the one that created you; it sees only what you send "
        "here. Send one full, standalone answer before finishing, plus earlier messages for any "
        "result that should alter your parent's plan. Calling this never ends your turn. An error "
        "from this call does not prove that nothing arrived, so do not resend the same text."
    ),
}

SPEC_TOOL_PARAMS = {
    "subagent": {
        "prompt": "Full instructions; the subagent cannot see this conversation.",
        "label": "A few words naming the task, used in listings.",
        "run_in_background": "Defaults to true. Use false only when you cannot continue without the result.",
    },
    "list_agents": {"scope": "children for your direct subagents, descendants for the whole tree below you."},
    "report": {"output": "Self-contained text for your parent agent."},
}

# §12.4 system prompt sections
SPEC_SYSTEM = {
    "T-SYSTEM-DEFAULT": (
        "You are dsh, a command-line agent working on one task. Work toward a complete and correct "
        "answer, and end your turn with that answer."
    ),
    "T-SYSTEM-DELEGATION": (
        "Delegation: background subagents run in parallel with you. Start independent subagents "
        "together and keep working. You do not need to poll: once a background subagent has no work "
        "left, the runtime posts a notice here with its outcome and latest output. Use send_message "
        "for more work, list_agents to see state, interrupt_agent to stop a runaway turn."
    ),
    "T-SYSTEM-REPORTING": (
        "Reporting: your parent agent never reads this conversation; it learns only what you pass to "
        "report. Finish by calling report once with a full, standalone answer, and call it sooner "
        "whenever a result should alter your parent's plan. A report never ends your turn."
    ),
}

# §12.5 runtime and tool texts
SPEC_RUNTIME = {
    "T-NOTICE-completed": "Subagent {id} is done and now idle; message it if you want more work from it.",
    "T-NOTICE-aborted": "Subagent {id} was cancelled partway through its task.",
    "T-NOTICE-max-tokens": "Subagent {id} reached its output token limit with the task unfinished.",
    "T-NOTICE-refusal": "Subagent {id} would not take on the task.",
    "T-NOTICE-error": "Subagent {id} ran into an error and did not complete its task.",
    "T-NOTICE-other": "Subagent {id} ended with an unrecognised outcome ({reason}) and did not complete its task.",
    "T-NOTICE-OUTPUT": "Most recent output from the subagent:",
    "T-NOTICE-NO-OUTPUT": "The subagent produced no output.",
    "T-NOTICE-TOOLCALL": "(requested tool {name} with arguments {arguments})",
    "T-REPORT-RELAY": "Report from subagent {id}:",
    "T-SPAWN-BG": (
        "Subagent {id} is now working in the background. A runtime notice will arrive once it has no "
        "work left; send_message gives it more work."
    ),
    "T-SPAWN-FG-EMPTY": "The subagent finished without output.",
    "T-SEND": "Subagent {id} accepted message {messageId}; it will handle it in a separate later turn.",
    "T-INTERRUPT": (
        "Stop requested for {id}: its current turn ends, and its queued messages wait for your next message."
    ),
    "T-LIST-ROW": "{id} | {status} | {label}",
    "T-LIST-DESC": "{id} | {status} | {label} | parent {parent} | depth {depth}",
    "T-LIST-UNREADABLE": "{id} | unreadable",
    "T-LIST-EMPTY": "No subagents found.",
    "T-REPORT-OK": "Your parent's inbox now holds this report (message {messageId}).",
    "T-TOOL-ERROR": "Tool failed [{code}]: {message}",
    "T-ABORTED-BEFORE-DISPATCH": "skipped: the turn was cancelled before this call started",
    "T-REPAIR-UNKNOWN": (
        "A crash cut this call off after it started, so its effect is unknown. Check the current state "
        "before repeating anything that is not safe to run twice."
    ),
    "T-REPAIR-NOT-STARTED": (
        "A crash stopped this call before it began, so nothing ran. Repeat it if you still want its result."
    ),
}

# §12.6 error messages (ids without a T- name in the spec use the code's own key)
SPEC_ERRORS = {
    "T-ERR-INVALID-ARGS": "arguments rejected: {issues}",
    "T-ERR-UNKNOWN-TOOL": "there is no tool named {name}",
    "T-ERR-DEPTH": "cannot start a subagent at depth {depth}; the limit is {max}",
    "T-ERR-DUPLICATE": "the id {id} is already taken by another session",
    "T-ERR-DRAINING": "shutdown in progress: no new subagent work is accepted",
    "T-ERR-DRAINING-SCOPED": "shutdown in progress below {root}: no new subagent work is accepted",
    "T-ERR-CLOSING-MESSAGE": (
        "subagent {id} is in the middle of shutting down and did not take the message; sending again reloads it"
    ),
    "T-ERR-CLOSING-PARENT": "{pid} is shutting down, so it cannot start subagents",
    "T-ERR-CLOSING-REPORT": "this subagent is shutting down; nothing was delivered",
    "T-ERR-STALE": "caller {aid} is not the live agent registered under that id",
    "T-ERR-NOT-PARENT": "only the parent that started subagent {id} may do this",
    "T-ERR-SELF": "interrupt_agent targets subagents; {aid} tried to stop itself",
    "T-ERR-NOT-DESCENDANT": "{aid} has no live subagent {id} anywhere below it",
    "T-ERR-NOT-REPORTER": "report is available only to background subagents that are currently loaded",
    "T-ERR-NOT-CHILD": "{pid} did not start {id}, so it cannot release it",
    "T-ERR-NOT-FOUND": "no saved subagent {id} could be loaded",
    "T-ERR-NOT-CONTINUABLE": "session {id} is not a continuable subagent and cannot take messages",
    "T-ERR-PARENT-GONE": "your parent has shut down, so nothing was delivered",
    "T-ERR-INCOMPLETE": "the subagent ended with {stopReason} instead of completing",
    "T-ERR-INCOMPLETE-PARTIAL": "\nPartial output:\n{text}",
    "T-ERR-TEARDOWN": "releasing subagent {id} failed: {detail}",
    "T-LOG-NOTICE-FAILED": (
        "could not hand the settlement notice of {id} to its parent ({detail}); teardown continues"
    ),
    "T-LOG-TEARDOWN-FAILED": "releasing subagent {id} failed: {detail}",
    "T-LOG-FLUSH-FAILED": "final save of {id} failed; a later resume may see older state: {detail}",
}

# §19 CLI texts (and §17.3's root-error line)
SPEC_CLI = {
    "T-CLI-INTERRUPTED": "interrupt accepted for {child}; its current turn will stop and its queued messages are kept",
    "T-CLI-NO-RUN": "no running dsh process hosts {child}; nothing was interrupted",
    "T-CLI-SEND-NO-RUN": "no running dsh process hosts {child}; follow-ups need a live run",
    "T-CLI-UNAUTHORIZED": "{child} is not a child of {parent}",
    "T-CLI-BAD-ADDRESS": "expected <parentSessionId>/<childSessionId>, got {value!r}",
    "T-CLI-UNKNOWN-SESSION": "no session {id} under {home}/sessions",
    "T-CLI-FENCES": "transcript {file} declares fences, which only run under the test profile or the pytest plugin",
    "T-CLI-STALLED": (
        "dsh: waiting on parked subagents {ids}; resume one with 'dsh send' or press Ctrl-C to stop"
    ),
    "T-CLI-SIGINT": "dsh: stopping agents (press Ctrl-C again to exit now)",
    "T-CLI-TIMEOUT": "dsh: time limit of {seconds}s reached; stopping agents",
    "T-CLI-ROOT-ERROR": "dsh: root turn failed [{code}]: {message}",
    # issue 9 (atomic creation, `dsh sessions prune --unmaterialized`)
    "T-CLI-UNMATERIALIZED": (
        "session {id} was never materialized (a crash interrupted its creation); "
        "'dsh sessions prune --unmaterialized' removes {path}"
    ),
    "T-CLI-PRUNE-REMOVED": "removed {path}",
    "T-CLI-PRUNE-WOULD-REMOVE": "would remove {path}",
    "T-CLI-PRUNE-KEPT-BUSY": "dsh: kept {path}: a running dsh is creating it",
    "T-CLI-PRUNE-KEPT-FOREIGN": "dsh: kept {path}: it holds {name}, which dsh did not write",
    "T-CLI-PRUNE-KEPT-CHANGED": "dsh: kept {path}: it changed while being pruned",
    "T-CLI-PRUNE-NONE": "dsh: no unmaterialized sessions under {home}/sessions",
    "T-CLI-PRUNE-NEEDS-KIND": "prune needs --older-than AGE (e.g. 7d), --unmaterialized, or both",
}

# issue 9 (§26 item 3): crash-proof trees
SPEC_CRASH = {
    "T-LOG-NOTICE-KEPT": (
        "could not write a settlement notice into {id} now ({detail}); the next resume of its tree delivers it"
    ),
    "T-RESUME-CONTINUE": (
        "The run stopped unexpectedly during your last turn and has been restarted. Continue your task from "
        "where this conversation leaves off."
    ),
    "T-ERR-RESUME-CHILD": (
        "session {id} is a subagent of the tree rooted at {root}; resume the tree with 'dsh run --resume {root}'"
    ),
}

# Issue 15 (hostile input): our wording, not the spec's; the issue wins over the spec (common brief).
ISSUE_15_TEXTS = {
    "T-ERR-BUDGET": "run budget exhausted: {kind} per run is limited to {limit}; settle with what you have",
    "T-CLI-BUDGET": "dsh: the run budget for {kind} was exhausted; raise it with --max-{kind} or limits in config",
    "T-CLI-HOME-NOT-DIR": "{path} is not a directory; give --home (or DSH_HOME) a directory",
    "T-CLI-HOME-READ-ONLY": "cannot write under {path}; give --home (or DSH_HOME) a writable directory",
    "T-UNSAFE-OWNER": "{path} is owned by uid {owner}, not by you (uid {uid}); fix: chown {uid} {path}",
    "T-UNSAFE-MODE": "{path} is group- or world-writable; fix: chmod 700 {path}",
    "T-UNSAFE-NOT-DIR": "{path} is not a directory (a symlink or a special file); fix: remove it",
    "T-UNSAFE-FILE": "{path} is {kind}, not a regular file; refusing to open it (fix: remove it)",
}

# Issue 16 (endpoints and the environment layer): our wording.
ISSUE_16_ENDPOINT_TEXTS = {
    "T-PROVIDER-NO-V1": "is /v1 missing from model.baseUrl? OpenAI-compatible servers usually answer at {suggested}",
    "T-LOG-UNKNOWN-FINISH": (
        "the model stopped with finish_reason {reason}, which dsh does not know; treating it as {mapped}"
    ),
    "T-CONFIG-DID-YOU-MEAN": "unknown key; did you mean {suggestion}?",
}

# Issue 16 items 3 and 5 (run flags; the notice names the failure): our wording.
ISSUE_16_NOTICE_TEXTS = {
    "T-CLI-RELEASED": "dsh: released parked subagents {ids}; their queued messages were discarded",
    "T-NOTICE-error-detail": "Subagent {id} ran into an error ({code}: {message}) and did not complete its task.",
    "T-NOTICE-max-tokens-detail": (
        "Subagent {id} reached its output token limit ({tokens} output tokens) with the task unfinished."
    ),
}

# Issue 11 items 1 and 4 (what the model saw; sessions you can manage): our wording.
ISSUE_11_TEXTS = {
    "T-LOG-REQUEST": (
        "model request {id} turn {turn} step {step}: model {model}, {messages} messages, "
        "system {system}, tools {tools} ({toolsHash})"
    ),
    "T-LOG-RESPONSE": (
        "model reply {id} turn {turn} step {step}: finish {finish}, blocks {blocks}, tokens in {input} out {output}"
    ),
    "T-CLI-BAD-AGE": "expected an age such as 7d, 12h, 30m or 45s, got {value!r}",
    "T-CLI-PRUNE-KEPT-LIVE": "dsh: kept {path}: a running dsh holds it",
    "T-CLI-PRUNE-NONE-OLD": "dsh: no sessions older than {age} to prune under {home}/sessions",
    "T-CLI-NO-REQUESTS": "dsh: session {id} records no model requests (it ran before dsh logged them, or never ran)",
    # items 2, 3, 5
    "T-CLI-LIVE-WAITING": "waiting on parked: {label} — `{send}` resumes",
}

# Issue 12 (the Temporal engine, first slice): our wording.
ISSUE_12_TEXTS = {
    "T-ENGINE-REPLAY-ONLY": "the Temporal engine cannot carry an in-process provider to its workers; use the configured model or --transcript NAME",
    "T-ENGINE-NO-LIVE": "this worker has no live model settings; start it with `dsh worker` (its model.* configuration and key)",
    "T-ENGINE-HOME-ID": "{path} is not a readable home id (a symbolic link, or empty); remove it and start the worker again",
    "T-ENGINE-UNSUPPORTED": "the Temporal engine does not support {what} yet",
    "T-ENGINE-RUNNING-LIMIT": "{limit} children of this agent are running, the most one agent runs at once on Temporal (temporal.maxRunningChildren); wait for a notice, then try again",
    "T-ENGINE-NOTICE-TOO-LARGE": "[the last reply of {id} is {size} bytes, more than a Temporal payload carries; read it in the child's log: dsh sessions show {id}]",
    "T-ENGINE-RUN-FAILED": "its Temporal run failed (its log shows how far it got: dsh sessions show {id}): {detail}",
    "T-ENGINE-REPORT-TOO-LARGE": "[this report is {size} bytes, more than a Temporal payload carries; read it in the child's log: dsh sessions show {id}]",
    "T-ENGINE-MESSAGE-TOO-LARGE": "{what} is {size} bytes, more than the Temporal engine carries in a message ({limit} bytes); shorten it, or pass a file's path to read instead",
    "T-ENGINE-NOT-INSTALLED": "engine temporal needs the temporal extra: pip install 'dsh[temporal]'",
    "T-ENGINE-UNREACHABLE": "no Temporal server at {address} (namespace {namespace}): {detail}",
    "T-ENGINE-NO-PAGES": "no worker of task queue {queue} read the logs of {root} within {seconds} s; start one (dsh worker) or read the home alone: --engine local",
}

SPEC_TEXTS = {
    **SPEC_SYSTEM, **SPEC_RUNTIME, **SPEC_ERRORS, **SPEC_CLI, **SPEC_CRASH, **ISSUE_15_TEXTS,
    **ISSUE_16_NOTICE_TEXTS, **ISSUE_16_ENDPOINT_TEXTS, **ISSUE_11_TEXTS, **ISSUE_12_TEXTS,
}


@pytest.mark.parametrize("tid", sorted(SPEC_TEXTS))
def test_text_matches_the_spec_byte_for_byte(tid):
    assert TEXTS[tid] == SPEC_TEXTS[tid]


def test_every_runtime_text_is_one_the_spec_defines():
    """No stray or renamed ids: the table is exactly the spec's set."""
    assert set(TEXTS) == set(SPEC_TEXTS)


@pytest.mark.parametrize("name", sorted(SPEC_TOOL_DESCRIPTIONS))
def test_tool_description_matches_the_spec(name):
    assert TOOL_DESCRIPTIONS[name] == SPEC_TOOL_DESCRIPTIONS[name]


def test_tool_tables_name_exactly_the_spec_tools_and_parameters():
    assert set(TOOL_DESCRIPTIONS) == set(SPEC_TOOL_DESCRIPTIONS)
    assert TOOL_PARAMS == SPEC_TOOL_PARAMS


def test_the_teardown_error_and_its_log_warning_share_one_wording():
    """§12.6: T-LOG-TEARDOWN-FAILED is "the message above" (`ACTIVATION_TEARDOWN_FAILED`)."""
    assert TEXTS["T-LOG-TEARDOWN-FAILED"] == TEXTS["T-ERR-TEARDOWN"]


def test_render_fills_every_placeholder():
    fields = {name for tid in TEXTS for _, name, _, _ in string.Formatter().parse(TEXTS[tid]) if name}
    values = {name: f"<{name}>" for name in fields}
    for tid in TEXTS:
        out = render(tid, **values)
        assert "{" not in out and "}" not in out, tid
    assert render("T-CLI-BAD-ADDRESS", value="a/b/c") == "expected <parentSessionId>/<childSessionId>, got 'a/b/c'"
    assert render("T-TOOL-ERROR", code="UNAUTHORIZED", message="no") == "Tool failed [UNAUTHORIZED]: no"


# The runtime's own wording (R- ids): no spec text, stable all the same (issue 14 item 6).
PINNED_RUNTIME_TEXTS = {
    "R-INBOX-TARGET": "unknown inbox target {target!r}",
    "R-INBOX-DUPLICATE": "message {id} is already queued",
    "R-INBOX-SPLICE": "invalid inbox splice at seq {seq}",
    "R-SESSION-NOT-AN-ID": "{id!r} is not a session id",
    "R-SESSION-EXISTS": "session {id} already exists",
    "R-SESSION-HEADER-VERSION": "header version {version} is not {expected}",
    "R-SESSION-BUSY-HERE": "session {id} is already live in this run",
    "R-SESSION-BUSY-ELSEWHERE": "session {id} is held by another run",
    "R-SESSION-CHECKPOINT": "checkpoint of session {id} failed: {error}",
    "R-SESSION-REPAIR": "repair of session {id} failed: {error}",
    "R-SESSION-CLOSED": "session {id} is closed",
    "R-EVENT-NOT-OBJECT": "event data is not an object: {kind}",
    "R-EVENT-NOT-JSON": "event data is not JSON: {error}",
    "R-EVENT-BAD-TYPE": "event type {type!r} is not a non-empty string",
    "R-EVENT-UNKNOWN-TYPE": "unknown event type {type}",
    "R-LOG-NO-FILE": "no session file at {path}",
    "R-LOG-EMPTY": "{source} is empty: it was never materialized",
    "R-LOG-NO-HEADER": "{source}: missing or malformed header",
    "R-LOG-HEADER-PROBLEM": "{source}: {problem}",
    "R-LOG-HEADER-UNTERMINATED": "{source}: header line is not terminated",
    "R-LOG-BAD-SHAPE": "{source}:{line}: {shape} (seq {seq})",
    "R-LOG-HEADER-ID": "header id {found} is not {expected}",
    "R-LOG-UNKNOWN-EVENT": "unknown event type {type} at seq {seq}",
    "R-LOG-INVALID": "{what} at seq {seq}",
    "R-LOG-NO-FILE-IN-DIR": "{directory} holds no session file: it was never materialized",
    "R-LOG-DAMAGE-BEFORE-END": "{source}: damaged line at byte {at} precedes a committed turn/end",
    "R-LOG-NEWER": "{source}: format version {version} is newer than {ours}",
}


def test_the_runtime_texts_are_pinned_byte_for_byte() -> None:
    from dsh.loader.texts import RUNTIME_TEXTS

    assert RUNTIME_TEXTS == PINNED_RUNTIME_TEXTS


def test_the_session_store_and_inbox_spell_no_error_text_of_their_own() -> None:
    """A typed error raised in loader/session/ or the inbox takes its message from texts.py
    (`render(...)`, or a variable holding one), never an inline string or f-string."""
    import ast
    from pathlib import Path

    from source_kit import parse_source

    root = Path(__file__).resolve().parents[1] / "loader"
    message_at = {"SessionError": 1, "InboxError": 1, "CheckpointError": 0}  # after the code, if any
    inline = []
    for path in [*sorted((root / "session").glob("*.py")), root / "agent" / "inbox.py"]:
        for node in ast.walk(parse_source(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in message_at:
                at = message_at[node.func.id]
                if len(node.args) > at and isinstance(node.args[at], (ast.JoinedStr, ast.Constant)):
                    inline.append(f"{path.name}:{node.lineno}")
    assert inline == []
