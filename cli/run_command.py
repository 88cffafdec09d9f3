"""The work of `dsh run` (SPEC §17, §19), apart from its Typer declaration (`cli.run`).

Exit codes (§17.3): 0 completed, 1 error/violations/internal/run budget exhausted, 2 usage or configuration, 3 max-tokens,
4 aborted, 5 refusal, 130 SIGINT, 143 SIGTERM; precedence 130/143 > 2 > violations > stop reason.

Stdlib only at module level, and typer only when a check fails (`cli.common.fail`): `cli.fastpath`
calls `run_command` for a plain `dsh run` without building the Typer app (issue 13), and `cli.run`
calls it for everything else, so both answer through the same code. The runtime is imported inside.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from dsh.cli.common import fail, resolve_writable_home, say, warn
from dsh.cli.configflags import config_flags

__all__ = ["run_command"]


def run_command(
    task: str | None = None,
    profile: str | None = None,
    overlay: list[str] | None = None,
    transcript: str | None = None,
    json_output: bool = False,
    home: Path | None = None,
    timeout: float | None = None,
    record: Path | None = None,
    force: bool = False,
    resume: str | None = None,
    output_last_message: Path | None = None,
    model: str | None = None,
    append_system_prompt: str | None = None,
    max_steps: int | None = None,
    parked: str | None = None,
    max_children: int | None = None,
    max_requests: int | None = None,
    max_tokens: int | None = None,
    engine: str | None = None,
    verbose: bool = False,
    quiet: bool = False,
) -> int:
    """Run one agent tree until it is quiet and print the root's answer; returns the exit code
    (a refusal before the run raises `typer.Exit` through `fail`)."""
    import asyncio
    import signal

    from dsh.loader.config import compose
    from dsh.loader.errors import ConfigError, DshError
    from dsh.loader.headless import RunRequest, RunSinks, run_tree
    from dsh.loader.texts import TEXTS
    from dsh.loader.transcripts import load_transcript

    if task == "-":
        task = _task_from_stdin()
    if task is None and transcript is None and resume is None:
        fail("give a TASK or --transcript NAME", 2)
    if output_last_message is not None and not output_last_message.parent.is_dir():
        # Checked before the run: a pipeline should not pay for a run whose answer has nowhere to go.
        fail(f"--output-last-message: no directory {output_last_message.parent}", 2)
    if record is not None and transcript is not None:
        fail("--record records a live run; it cannot be combined with --transcript", 2)
    if record is not None and (record.exists() or record.is_symlink()) and not force:
        # Checked before the run: a recording would silently replace a transcript someone keeps.
        fail(f"--record: {record} already exists; give --force to overwrite it", 2)
    if record is not None and resume is not None and task is None:
        fail("--record with --resume needs the TASK to record", 2)
    try:
        # lean: validated without importing pydantic unless the input is invalid or unusual (issue 13)
        script = load_transcript(transcript, lean=True) if transcript is not None else None
        if script is not None:
            from dsh.loader.tools import lint_transcript

            lint_transcript(script)
        if script is not None and task is not None:
            fail("give either TASK or --transcript (whose task is used), not both"
                 + (_flag_value_hint(task) or ""), 2)
        flags = config_flags(model=model, append_system_prompt=append_system_prompt, max_steps=max_steps,
                             parked=parked, max_children=max_children, max_requests=max_requests,
                             max_tokens=max_tokens, engine=engine)
        # The command line outranks every config layer (issue 15 finding 9, issue 16).
        composed = compose(profile=profile, overlays=overlay or [], transcript=script, flags=flags, lean=True)
    except DshError as exc:
        fail(exc.message, 2)
    config = composed.config
    if config.engine == "temporal":
        import importlib.util

        if importlib.util.find_spec("temporalio") is None:
            from dsh.loader.texts import render

            fail(render("T-ENGINE-NOT-INSTALLED"), 2)
    run_home = resolve_writable_home(home)
    if resume == "last":
        resume = _newest_root(run_home)
    if script is not None and script.spec.fences and not composed.fences_allowed:
        from dsh.loader.texts import render

        fail(render("T-CLI-FENCES", file=script.path), 2)

    out = sys.stdout

    def emit(record_: dict[str, Any]) -> None:
        # One flushed line per record: a reader follows the run live (e.g. to find a child to
        # interrupt), and a block buffer would hold events back until the run ends.
        line = json.dumps(record_, separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            out.write(line)
            out.flush()
        except BrokenPipeError:
            _drop_stdout()

    sinks = RunSinks(on_warning=warn)
    if json_output:
        from dsh.loader.ndjson import RecordStream

        sinks.records = RecordStream(emit)
    live = None if quiet or not sys.stderr.isatty() else _live_tree(sinks)

    received: list[int] = []

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if received:
                if live is not None:
                    live.abandon()
                os._exit(130 if received[0] == signal.SIGINT else 143)  # second signal: now
            received.append(signum)
            warn(TEXTS["T-CLI-SIGINT"])
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        request = RunRequest(
            home=run_home, config=config, task=task, transcript=script,
            fences_allowed=composed.fences_allowed, timeout=timeout, resume=resume, stop=stop,
            serve_control=True, sinks=sinks, record=record, overlays=list(overlay or []),
            profile=_profile_label(composed.profile_path),
        )
        if config.engine == "temporal":
            # Only here: the local engine never imports temporalio (tests/temporal/test_seam.py).
            from dsh.loader.engines.client import run_tree_temporal

            request.serve_control = False  # dsh interrupt/send reach Temporal runs through its client (next slice)
            return await run_tree_temporal(request, config.temporal)
        return await run_tree(request)

    from dsh.cli.fastpath import started

    _warnings_to_stderr()
    started()  # the runtime is imported: freeze it and collect garbage again from here on

    from dsh.cli.logsetup import log_level, log_to_stderr

    key_env = config.model.api_key_env
    try:
        with log_to_stderr(log_level(verbose, os.environ), [os.environ.get(key_env, "")] if key_env else []):
            if live is not None:
                with live:
                    result = asyncio.run(main())
            else:
                result = asyncio.run(main())
    except ConfigError as exc:
        fail(exc.message, 2)
    except DshError as exc:  # an unsafe home or session file is the user's to fix: exit 2 (issue 15)
        fail(f"{exc.message} [{exc.code}]", 2 if exc.code == "SESSION_UNSAFE" else 1)
    # Precedence (§17.3): a signal's 130 / 143 outranks the stop reason, in the record as in the exit.
    exit_code = (130 if received[0] == signal.SIGINT else 143) if received else result.exit_code
    if sinks.records is not None:
        sinks.records.result({**result.to_json(), "exitCode": exit_code})
    elif result.output or exit_code == 0:  # a failed root with no answer prints nothing, not "\n"
        try:
            say(result.output)
        except BrokenPipeError:
            _drop_stdout()
    if output_last_message is not None and not _write_last_message(output_last_message, result.output):
        exit_code = exit_code or 1  # the answer a pipeline asked for is missing: not a success
    if result.released:
        from dsh.loader.texts import render

        warn(render("T-CLI-RELEASED", ids=", ".join(result.released)))
    for v in result.violations:
        warn(f"dsh: {v['code']}" + (f" [{v['agent']}]" if v.get("agent") else "") + f": {v.get('message', '')}")
    if result.stop_reason == "error" and result.error:
        from dsh.loader.texts import render

        warn(render("T-CLI-ROOT-ERROR", code=result.error.get("code"), message=result.error.get("message")))
    return exit_code


def _warnings_to_stderr() -> None:
    """The runtime's warnings as `dsh: …` lines on the current stderr (looked up per line, so the
    live tree's proxy puts them above the tree); without a handler, logging's last resort prints
    them bare. Installed once per process (CliRunner runs many commands in one)."""
    import logging

    runtime = logging.getLogger("dsh.loader")
    if any(getattr(h, "dsh_lines", False) for h in runtime.handlers):
        return

    class DshLines(logging.Handler):
        dsh_lines = True

        def emit(self, record: logging.LogRecord) -> None:
            try:
                warn(f"dsh: {record.getMessage()}")
            except Exception:  # a broken stderr must not break the run
                self.handleError(record)

    runtime.addHandler(DshLines(logging.WARNING))


def _flag_value_hint(task: str) -> str | None:
    """`dsh run --json true --transcript hello`: flags take no value, so `true` became the TASK; say so."""
    if task.lower() in ("true", "false", "yes", "no", "1", "0", "on", "off"):
        return f"; flags such as --json and --quiet take no value, so {task!r} was read as the TASK"
    return None


def _profile_label(path: Path) -> str:
    """A shipped profile by its name (`default`), any other by the path it was given as."""
    from dsh.loader.errors import DshError
    from dsh.loader.shipped import shipped_dir

    try:
        shipped = path.resolve().parent == shipped_dir("profiles").resolve()
    except DshError:  # no shipped directory: every profile is a path
        shipped = False
    return path.stem if shipped else str(path)


def _task_from_stdin() -> str:
    """`dsh run -`: the task is stdin, up to EOF, without the newline a shell pipe adds."""
    text = sys.stdin.read().rstrip("\r\n")
    if not text.strip():
        fail("dsh run -: the task read from stdin is empty", 2)
    return text


def _newest_root(home: Path) -> str:
    """`--resume last`: the root session (no parent) created last in `home`; ties by id."""
    from dsh.cli.session_rows import read_headers

    roots: list[tuple[int, str]] = [
        (h.get("createdAt") or 0, sid) for sid, h in read_headers(home).items() if not h.get("parentSession")
    ]
    if not roots:
        fail(f"--resume last: no root session under {home}/sessions", 2)
    return max(roots)[1]


def _write_last_message(path: Path, output: str) -> bool:
    """`--output-last-message FILE`: the bytes the default mode prints (answer + newline), written
    whole: a temporary file renamed over FILE, so a reader never sees half an answer."""
    tmp = path.with_name(f".{path.name}.dsh-tmp")
    try:
        tmp.write_text(output + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        warn(f"dsh: --output-last-message: could not write {path}: {exc.strerror or exc}")
        tmp.unlink(missing_ok=True)
        return False
    return True


def _drop_stdout() -> None:
    """The reader closed stdout (`dsh run --json | head`): send the rest to /dev/null, so the run
    finishes with its own exit code instead of a traceback per event and one more at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real descriptor (an in-process runner): nothing to redirect
        pass


def _live_tree(sinks: Any) -> Any:
    """The live tree on stderr (issue 11 item 2), fed by the run's sinks; stdout is never touched."""
    from rich.console import Console  # deferred: only a TTY run pays for rich; rich honours NO_COLOR

    from dsh.cli.live import LiveTree

    live = LiveTree(Console(stderr=True, highlight=False))
    sinks.on_agent, sinks.on_event, sinks.on_lifecycle = live.agent, live.event, live.lifecycle
    sinks.on_waiting = live.waiting
    return live
