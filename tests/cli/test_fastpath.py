"""Issue 13: `dsh interrupt`, `dsh send`, a plain `dsh run` and `dsh --version` answered without the Typer app
(`cli.fastpath`) must be indistinguishable from the app: the same stdout, stderr and exit code for
every argument vector the fast path takes, and the app's own answer for every one it declines.

In-process rows call both paths in this interpreter with stdout and stderr captured; the subprocess
rows go through the real console script (`dsh`, i.e. `cli.main:entry`) against the Typer app
inside the same guard (`TYPER_ONLY`). `exit_promptly` is checked in subprocesses, since it
ends the process.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from importlib.metadata import version
from pathlib import Path

import pytest
from cli_kit import DSH, EXIT_BACKSTOP, LiveRun, subprocess_env, transcript
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh import cli
from dsh.cli.app import app
from dsh.cli.fastpath import plan
from dsh.loader.texts import render

STRANGER = "session-00000000-0000-4000-8000-000000000000"
# The console script as it was before the fast path: the Typer app inside the guard.
TYPER_ONLY = [sys.executable, "-c", "from dsh.cli.app import app; from dsh.cli.main import guard; guard(lambda: app(prog_name='dsh'))"]
Outcome = tuple[int, str, str]  # (exit code, stdout, stderr)


def outcome_of(call: Callable[[], object]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            call()
        except SystemExit as exc:
            code = exc.code
    assert isinstance(code, int), f"no integer exit: {code!r}"
    return code, out.getvalue(), err.getvalue()


def by_typer(argv: Sequence[str]) -> Outcome:
    return outcome_of(lambda: app(list(argv), prog_name="dsh"))


def by_fast_path(argv: Sequence[str]) -> Outcome:
    call = plan(argv, {})
    assert call is not None, f"the fast path declined {argv!r}"
    return outcome_of(call)


@pytest.fixture(scope="module")
def finished() -> Iterator[tuple[Path, str, str]]:
    """A home holding one finished tree, `(home, root, child)`: no run serves it any more."""
    import shutil
    import tempfile

    scratch = Path(tempfile.mkdtemp(prefix="dsh-fast-", dir="/tmp"))
    home = scratch / "h"
    try:
        code, stdout, _ = by_typer(["run", "--json", "--transcript", "background-settlement", "--home", str(home)])
        assert code == 0
        start = next(r for r in map(json.loads, stdout.splitlines())
                     if r["type"] == "lifecycle" and r["name"] == "subagent/start")
        yield home, start["parentSessionId"], start["sessionId"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_developer_home(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("DSH_HOME", "DSH_DEBUG"):
        monkeypatch.delenv(name, raising=False)


# Vectors the fast path takes; `{home}`, `{root}`, `{child}`, `{file}` are filled in per test.
TAKEN = {
    "interrupt-no-run": ["interrupt", "{root}/{child}", "--home", "{home}"],
    "interrupt-home-first": ["interrupt", "--home", "{home}", "{root}/{child}"],
    "interrupt-home-equals": ["interrupt", "{root}/{child}", "--home={home}"],
    "interrupt-bad-address": ["interrupt", "no-slash", "--home", "{home}"],
    "interrupt-empty-address": ["interrupt", "", "--home", "{home}"],
    "interrupt-dotdot": ["interrupt", "a/..", "--home", "{home}"],
    "interrupt-unknown-child": ["interrupt", "{root}/not-a-child", "--home", "{home}"],
    "interrupt-wrong-parent": ["interrupt", f"{STRANGER}/{{child}}", "--home", "{home}"],
    "interrupt-root-root": ["interrupt", "{root}/{root}", "--home", "{home}"],
    "interrupt-home-is-a-file": ["interrupt", "{root}/{child}", "--home", "{file}"],
    "interrupt-empty-home": ["interrupt", "{root}/{child}", "--home="],
    "interrupt-missing-home": ["interrupt", "{root}/{child}", "--home", "{home}/nowhere"],
    "send-no-run": ["send", "{root}/{child}", "more work", "--home", "{home}"],
    "send-message-first-home": ["send", "--home", "{home}", "{root}/{child}", "ünïcode ✓"],
    "send-empty-message": ["send", "{root}/{child}", "", "--home", "{home}"],
    "send-bad-address": ["send", "a/b/c", "hello", "--home", "{home}"],
    "send-wrong-parent": ["send", "{child}/{root}", "hello", "--home", "{home}"],
    "version": ["--version"],
}

# Vectors it must leave to Typer: help, usage errors, and shapes whose click reading is subtle.
DECLINED = {
    "no-args": [],
    "help": ["--help"],
    "version-and-more": ["--version", "interrupt"],
    "interrupt-help": ["interrupt", "--help"],
    "interrupt-help-after": ["interrupt", "a/b", "--help"],
    "send-help": ["send", "--help"],
    "interrupt-missing-address": ["interrupt"],
    "interrupt-extra-argument": ["interrupt", "a/b", "c"],
    "interrupt-home-without-value": ["interrupt", "a/b", "--home"],
    "interrupt-unknown-option": ["interrupt", "a/b", "--bogus"],
    "interrupt-short-option": ["interrupt", "-x", "a/b"],
    "interrupt-double-dash": ["interrupt", "--", "a/b"],
    "interrupt-repeated-home": ["interrupt", "a/b", "--home", "x", "--home", "y"],
    "interrupt-option-like-home": ["interrupt", "a/b", "--home", "-x"],
    "interrupt-dash-address": ["interrupt", "-"],
    "send-missing-message": ["send", "a/b"],
    "send-option-like-message": ["send", "a/b", "-m"],
    "send-three-positionals": ["send", "a/b", "x", "y"],
    "other-command": ["sessions", "list"],
    "unknown-command": ["interupt", "a/b"],
}


def filled(argv: Sequence[str], home: Path, root: str, child: str, file: Path) -> list[str]:
    return [a.format(home=home, root=root, child=child, file=file) for a in argv]


# `dsh run` vectors the fast path takes; `{fresh}` is a home that does not exist yet (each path gets
# the same one, emptied in between), `{file}` a plain file.
RUN_TAKEN = {
    "run-transcript": ["run", "--transcript", "background-settlement", "--home", "{fresh}"],
    "run-json": ["run", "--json", "--transcript", "background-settlement", "--home={fresh}"],
    "run-json-quiet": ["run", "--transcript", "hello", "-q", "--json", "--home", "{fresh}"],
    "run-verbose": ["run", "-v", "--transcript", "hello", "--home", "{fresh}"],
    "run-config-flags": ["run", "--transcript", "hello", "--max-steps", "5", "--max-children", "3", "--max-requests",
                         "10", "--max-tokens", "100000", "--timeout", "30.5", "--parked", "wait", "--model", "m",
                         "--append-system-prompt", "Be brief.", "--home", "{fresh}"],
    "run-profile-overlays": ["run", "--transcript", "hello", "--profile", "test", "--overlay", "quiet-reports",
                             "--overlay=quiet-reports", "--json", "--home", "{fresh}"],
    "run-last-message": ["run", "--transcript", "hello", "--output-last-message", "{file}", "--home", "{fresh}"],
    "run-nothing": ["run", "--home", "{fresh}"],
    "run-bad-max-steps": ["run", "--transcript", "hello", "--max-steps", "0", "--home", "{fresh}"],
    "run-bad-parked": ["run", "--transcript", "hello", "--parked", "never", "--home", "{fresh}"],
    "run-task-and-transcript": ["run", "true", "--transcript", "hello", "--home", "{fresh}"],
    "run-unknown-transcript": ["run", "--transcript", "no-such-transcript", "--home", "{fresh}"],
    "run-unknown-profile": ["run", "--transcript", "hello", "--profile", "no-such-profile", "--home", "{fresh}"],
    "run-unknown-overlay": ["run", "--transcript", "hello", "--overlay", "no-such-overlay", "--home", "{fresh}"],
    "run-record-and-transcript": ["run", "--transcript", "hello", "--record", "{fresh}.yaml", "--home", "{fresh}"],
    "run-record-exists": ["run", "a task", "--record", "{file}", "--home", "{fresh}"],
    "run-no-last-message-directory": ["run", "--transcript", "hello", "--output-last-message", "{file}/x",
                                      "--home", "{fresh}"],
    "run-resume-last-in-empty-home": ["run", "--resume", "last", "--home", "{fresh}"],
    "run-resume-unknown": ["run", "--resume", "session-0", "--home", "{fresh}"],
    "run-home-is-a-file": ["run", "--transcript", "hello", "--home", "{file}"],
}

# `dsh run` vectors left to Typer: help, usage errors, and values click and typer might read otherwise.
RUN_DECLINED = {
    "run-help": ["run", "--help"],
    "run-help-after": ["run", "--transcript", "hello", "--help"],
    "run-stdin-task": ["run", "-"],
    "run-two-tasks": ["run", "a", "b"],
    "run-transcript-without-value": ["run", "--transcript"],
    "run-empty-value": ["run", "--transcript", ""],
    "run-empty-inline-value": ["run", "--home=", "--transcript", "hello"],
    "run-option-like-value": ["run", "--transcript", "-q"],
    "run-repeated-home": ["run", "--home", "a", "--home", "b"],
    "run-repeated-flag": ["run", "--json", "--json", "--transcript", "hello"],
    "run-flag-twice-spelled": ["run", "-q", "--quiet", "--transcript", "hello"],
    "run-flag-with-value": ["run", "--json=true", "--transcript", "hello"],
    "run-short-flags-together": ["run", "-qv", "--transcript", "hello"],
    "run-double-dash": ["run", "--", "task"],
    "run-unknown-option": ["run", "--bogus", "--transcript", "hello"],
    "run-leading-zero": ["run", "--max-steps", "07", "--transcript", "hello"],
    "run-negative": ["run", "--max-steps", "-1", "--transcript", "hello"],
    "run-not-a-number": ["run", "--max-steps", "many", "--transcript", "hello"],
    "run-exponent": ["run", "--timeout", "1e3", "--transcript", "hello"],
    "run-spaces": ["run", "--max-tokens", " 5", "--transcript", "hello"],
}
DECLINED.update(RUN_DECLINED)

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_CLOCK = re.compile(r'"(time|\w+At|\w+Ms)":[0-9.]+')


def comparable(outcome: Outcome) -> Outcome:
    """Session ids, message ids and clock readings differ between two runs; nothing else may."""
    code, stdout, stderr = outcome
    def mask(text: str) -> str:
        return _CLOCK.sub(r'"\1":0', _UUID.sub("<uuid>", text))
    return code, mask(stdout), mask(stderr)


def run_both(argv: Sequence[str], scratch: Path) -> tuple[Outcome, Outcome]:
    """(fast path, Typer) for a `dsh run` vector, each from the same fresh home and file."""
    import shutil

    outcomes = []
    for answer in (by_fast_path, by_typer):
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        (scratch / "file").write_text("not a home")
        outcomes.append(comparable(answer([a.format(fresh=scratch / "home", file=scratch / "file") for a in argv])))
        (scratch / "file").unlink()  # --output-last-message wrote here: both answers must have
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("name", sorted(TAKEN))
def test_the_fast_path_answers_exactly_as_the_app_does(name, finished, tmp_path):
    home, root, child = finished
    (tmp_path / "file").write_text("not a home")
    argv = filled(TAKEN[name], home, root, child, tmp_path / "file")
    before = {p: p.read_bytes() for p in sorted(home.rglob("session.jsonl"))}

    fast = by_fast_path(argv)
    typer = by_typer(argv)

    assert fast == typer
    assert fast[1] or fast[2]  # every row says something, so equality is not two silences
    assert {p: p.read_bytes() for p in sorted(home.rglob("session.jsonl"))} == before


def test_the_rows_cover_each_answer(finished, tmp_path):
    """The table is not all one answer: success, the no-run exit 1, refusals with exit 2, the version."""
    home, root, child = finished
    (tmp_path / "file").write_text("not a home")
    answers = {name: by_fast_path(filled(argv, home, root, child, tmp_path / "file")) for name, argv in TAKEN.items()}

    assert answers["interrupt-no-run"] == (0, render("T-CLI-NO-RUN", child=child) + "\n", "")
    assert answers["send-no-run"] == (1, "", "dsh: " + render("T-CLI-SEND-NO-RUN", child=child) + "\n")
    assert answers["interrupt-wrong-parent"] == (
        2, "", "dsh: " + render("T-CLI-UNAUTHORIZED", child=child, parent=STRANGER) + "\n")
    assert answers["interrupt-bad-address"] == (2, "", "dsh: " + render("T-CLI-BAD-ADDRESS", value="no-slash") + "\n")
    assert answers["version"] == (0, f"dsh {version('dsh')}\n", "")


@pytest.mark.parametrize("name", sorted(RUN_TAKEN))
def test_a_plain_run_answers_exactly_as_the_app_does(name, tmp_path):
    fast, typer = run_both(RUN_TAKEN[name], tmp_path / "scratch")

    assert fast == typer
    assert fast[1] or fast[2]


def test_the_run_rows_cover_each_answer(tmp_path):
    """Successes (answer, NDJSON, the verbose log), and refusals with exit 2 before anything runs."""
    answers = {name: by_fast_path_in(argv, tmp_path / name) for name, argv in RUN_TAKEN.items()}

    assert answers["run-transcript"] == (0, "PARENT_RECEIVED_CHILD_RESULT\n", "")
    assert [json.loads(line)["type"] for line in answers["run-json"][1].splitlines()][::len(answers["run-json"][1].splitlines()) - 1] == ["init", "result"]
    assert "DEBUG" in answers["run-verbose"][2] and answers["run-verbose"][0] == 0
    assert answers["run-last-message"][0] == 0
    for name in ("run-nothing", "run-bad-max-steps", "run-bad-parked", "run-task-and-transcript",
                 "run-unknown-transcript", "run-unknown-profile", "run-unknown-overlay", "run-record-and-transcript",
                 "run-record-exists", "run-no-last-message-directory", "run-resume-last-in-empty-home",
                 "run-home-is-a-file"):
        code, stdout, stderr = answers[name]
        assert (code, stdout, stderr[:5]) == (2, "", "dsh: "), name
    assert answers["run-nothing"][2] == "dsh: give a TASK or --transcript NAME\n"


def by_fast_path_in(argv: Sequence[str], scratch: Path) -> Outcome:
    scratch.mkdir()
    (scratch / "file").write_text("not a home")
    return by_fast_path([a.format(fresh=scratch / "home", file=scratch / "file") for a in argv])


def test_the_run_tables_match_the_typer_declaration():
    """`cli.fastpath`'s reading of `dsh run` is the app's: every option it takes is declared with
    the same parameter, as a flag or a value of the same type, repeatable exactly when it is a list;
    every option the app declares is one the fast path knows (or a new one would be read as unknown
    and fall back, which is safe, but would silently stop the fast path for it)."""
    import typing

    import typer.main

    from dsh.cli import run as run_module
    from dsh.cli.fastpath import RUN_FLAGS, RUN_OPTIONS

    hints = typing.get_type_hints(run_module.run)
    kinds = {bool: "flag", str: "str", int: "int", float: "float", Path: "path", list[str]: "list"}
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    declared: dict[str, tuple[str, str]] = {}
    for param in command.params:
        assert param.envvar is None  # an option read from the environment would be another story
        if param.opts == [param.name]:  # the TASK argument
            continue
        kind = kinds[next(a for a in typing.get_args(hints[param.name]) or [hints[param.name]] if a is not type(None))]
        assert param.multiple == (kind == "list") and param.is_flag == (kind == "flag"), param.name
        for opt in [*param.opts, *param.secondary_opts]:
            declared[opt] = (param.name, kind)
    known = {**RUN_OPTIONS, **{flag: (parameter, "flag") for flag, parameter in RUN_FLAGS.items()}}

    assert known == declared
    assert [p.name for p in command.params if p.opts == [p.name]] == ["task"]


RUN_TOKENS = ["run", "--transcript", "hello", "--json", "-q", "--max-steps", "3", "0", "07", "--timeout", "1.5",
              "--home", "{fresh}", "--overlay", "quiet-reports", "", "-", "--", "--help", "true", "--resume", "last"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(RUN_TOKENS), max_size=6).map(lambda tail: ["run", *tail]))
def test_any_run_vector_the_fast_path_takes_gets_the_apps_answer(tmp_path_factory, argv):
    if plan(argv, {}) is not None:
        fast, typer = run_both(argv, tmp_path_factory.mktemp("any-run"))
        assert fast == typer


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_help_and_usage_errors_are_left_to_the_app(name):
    assert plan(DECLINED[name], {}) is None


def test_shell_completion_is_left_to_the_app():
    assert plan(["interrupt", "a/b"], {"_DSH_COMPLETE": "bash_source"}) is None
    assert plan(["interrupt", "a/b"], {"DSH_HOME": "/x"}) is not None


def test_the_version_is_the_installed_distributions():
    assert cli.__version__ == version("dsh")


TOKENS = ["interrupt", "send", "--home", "--home={home}", "{home}", "{root}/{child}", "{child}/{root}",
          f"{STRANGER}/{{child}}", "a/b", "", "x y", "-", "--", "--help", "-x", "--version", "ü"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(TOKENS), max_size=6))
def test_any_vector_the_fast_path_takes_gets_the_apps_answer(finished, tmp_path, tokens):
    """Random vectors over the tokens that matter: whenever `plan` takes one, the answers agree."""
    home, root, child = finished
    argv = filled(tokens, home, root, child, tmp_path / "file")
    call = plan(argv, {})
    if call is not None:
        assert outcome_of(call) == by_typer(argv)


# -- through the console script --------------------------------------------------------------------

def run(argv: Sequence[str], command: Sequence[str] = DSH) -> tuple[int, str, str]:
    done = subprocess.run([*command, *argv], capture_output=True, text=True, timeout=EXIT_BACKSTOP,
                          env=subprocess_env(), stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("name", ["interrupt-no-run", "interrupt-wrong-parent", "send-no-run", "version"])
def test_the_console_script_answers_as_the_app_does(name, finished, tmp_path):
    home, root, child = finished
    argv = filled(TAKEN[name], home, root, child, tmp_path / "file")

    assert run(argv) == run(argv, TYPER_ONLY)


@pytest.mark.parametrize("name", ["interrupt-help", "interrupt-missing-address", "send-missing-message"])
def test_the_console_script_leaves_help_and_usage_errors_to_the_app(name):
    argv = DECLINED[name]
    code, stdout, stderr = run(argv)

    assert (code, stdout, stderr) == run(argv, TYPER_ONLY)
    assert (code, "Usage: dsh" in stdout + stderr) == ((0, True) if "--help" in argv else (2, True))


def test_the_console_script_sends_and_interrupts_in_a_live_run_as_the_app_does(home, tmp_path):
    """Both paths against one live run. `send` while the child's turn hangs: each queues a follow-up
    and prints its new message id (exit 0). Then `interrupt`: the first call stops the hanging turn,
    the second is an accepted no-op on the now idle child; both print T-CLI-INTERRUPTED, exit 0."""
    agents = {
        "root": {"replies": [{"toolCalls": [{"id": "sa", "name": "subagent",
                                             "arguments": {"label": "c", "prompt": "wait"}}]}, {"hang": {}}]},
        "child": {"spawnedBy": "sa", "replies": [{"hang": {}}]},
    }
    live = LiveRun(["--transcript", str(transcript(tmp_path, "hang", agents)), "--home", str(home)])
    try:
        start = live.wait_for(lambda r: r["type"] == "lifecycle" and r["name"] == "subagent/start", "subagent/start")
        address = f"{start['parentSessionId']}/{start['sessionId']}"
        live.wait_event(start["sessionId"], "user/message")  # its turn is under way: next is the hang
        sent = [run(["send", address, "more", "--home", str(home)], command) for command in (DSH, TYPER_ONLY)]
        assert [(code, stderr) for code, _, stderr in sent] == [(0, ""), (0, "")]
        ids = [stdout.strip() for _, stdout, _ in sent]
        assert len(set(ids)) == 2 and all(len(i) == 36 and stdout.count("\n") == 1 for i, (_, stdout, _) in zip(ids, sent))

        argv = ["interrupt", address, "--home", str(home)]
        expected = (0, render("T-CLI-INTERRUPTED", child=start["sessionId"]) + "\n", "")

        assert run(argv) == expected
        assert run(argv, TYPER_ONLY) == expected
    finally:
        live.signal()
        live.finish()


@pytest.mark.parametrize("stdout", ["broken-pipe", "closed"])
@pytest.mark.parametrize("name", ["version", "interrupt-no-run"])
def test_a_broken_or_closed_stdout_gets_the_apps_answer(name, stdout, finished, tmp_path):
    """Click's rules: a write to a pipe nobody reads (EPIPE) exits 1 quietly; with stdout closed
    from the start, `echo` writes nothing (`--version` exits 0) and our `say` fails (internal error)."""
    import os

    home, root, child = finished
    argv = filled(TAKEN[name], home, root, child, tmp_path / "file")

    def answer(command: Sequence[str]) -> tuple[int, str]:
        if stdout == "closed":
            done = subprocess.run([*command, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env=subprocess_env(), timeout=EXIT_BACKSTOP, stdin=subprocess.DEVNULL,
                                  preexec_fn=lambda: os.close(1))
        else:
            read_end, write_end = os.pipe()
            os.close(read_end)
            try:
                done = subprocess.run([*command, *argv], stdout=write_end, stderr=subprocess.PIPE, text=True,
                                      env=subprocess_env(), timeout=EXIT_BACKSTOP, stdin=subprocess.DEVNULL)
            finally:
                os.close(write_end)
        first_line = done.stderr.splitlines()[0] if done.stderr else ""
        return done.returncode, first_line  # the second line names a fresh temp file

    assert answer(DSH) == answer(TYPER_ONLY)


# -- the prompt exit -------------------------------------------------------------------------------

def python(code: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=EXIT_BACKSTOP,
                          env=subprocess_env())
    return done.returncode, done.stdout, done.stderr


def test_the_prompt_exit_flushes_and_runs_atexit_handlers_first():
    code = (
        "import atexit, sys\n"
        "from dsh.cli.fastpath import exit_promptly\n"
        "atexit.register(lambda: sys.stdout.write('atexit ran\\n'))\n"
        "sys.stdout.write('buffered, not flushed')\n"
        "exit_promptly(SystemExit(5))\n"
        "sys.stdout.write('; exit_promptly returned')\n"
    )
    assert python(code) == (5, "buffered, not flushedatexit ran\n", "")


def test_the_prompt_exit_steps_aside_while_another_thread_runs():
    """The normal exit joins non-daemon threads (a worker finishing a write); so must we."""
    code = (
        "import sys, threading\n"
        "from dsh.cli.fastpath import exit_promptly\n"
        "release = threading.Event()\n"
        "worker = threading.Thread(target=release.wait)\n"
        "worker.start()\n"
        "exit_promptly(SystemExit(5))\n"
        "print('returned')\n"
        "release.set()\n"
    )
    assert python(code) == (0, "returned\n", "")


def test_the_prompt_exit_steps_aside_when_a_flush_fails_or_the_code_is_a_message():
    code = (
        "import sys\n"
        "from dsh.cli.fastpath import exit_promptly\n"
        "exit_promptly(SystemExit('a message'))\n"
        "real = sys.stdout\n"
        "class Broken:\n"
        "    def flush(self): raise BrokenPipeError(32, 'Broken pipe')\n"
        "sys.stdout = Broken()\n"
        "exit_promptly(SystemExit(5))\n"
        "sys.stdout = real\n"
        "print('returned twice')\n"
    )
    assert python(code) == (0, "returned twice\n", "")


# -- the collector during start-up -----------------------------------------------------------------

REPORT_GC = ("import atexit, gc; atexit.register(lambda: print('gc', gc.isenabled(), gc.get_freeze_count() > 0, "
             "gc.get_threshold()))\n")


@pytest.mark.parametrize("argv", [
    ["run", "--transcript", "hello", "--home", "{home}"],
    ["sessions", "list", "--home", "{home}"],
], ids=["run", "sessions"])
def test_the_console_script_enables_the_collector_again_after_start_up(tmp_path, argv):
    """`pause_gc` holds the collector for the imports only: by the time the command works (and at
    exit, where the atexit report runs) it is enabled again, with start-up's objects frozen and the
    young generation's threshold raised (issue 13: the run's survivors are not re-traversed 400 times)."""
    argv = [a.format(home=tmp_path / "h") for a in argv]
    code = REPORT_GC + f"import sys; sys.argv = ['dsh', *{argv!r}]\nfrom cli.main import entry; entry()\n"

    exit_code, stdout, stderr = python(code)

    assert (exit_code, stderr) == (0, "")
    assert stdout.splitlines()[-1] == "gc True True (10000, 5, 5)"


def test_an_in_process_caller_keeps_its_collector(dsh, home):
    import gc

    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    result = dsh("run", "--transcript", "hello", "--home", home)

    assert result.exit_code == 0
    assert (gc.isenabled(), gc.get_freeze_count(), gc.get_threshold()) == (True, frozen, threshold)
