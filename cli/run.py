"""`dsh run` (SPEC §17, §19): one agent tree to quiescence; the answer on stdout.

Exit codes (§17.3): 0 completed, 1 error/violations/internal/run budget exhausted, 2 usage or configuration, 3 max-tokens,
4 aborted, 5 refusal, 130 SIGINT, 143 SIGTERM; precedence 130/143 > 2 > violations > stop reason.
The runtime is imported inside the command: `dsh --help` never pays for it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dsh.cli.common import fail, resolve_writable_home, say, warn


def run(
    task: Annotated[Optional[str], typer.Argument(help="The task for the root agent.")] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", help="Profile name or path.")] = None,
    overlay: Annotated[Optional[list[str]], typer.Option("--overlay", help="Overlay name or path (repeatable).")] = None,
    transcript: Annotated[Optional[str], typer.Option("--transcript", help="Replay a keyless transcript (name or path).")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="NDJSON events, lifecycle records and one result on stdout.")] = False,
    home: Annotated[Optional[Path], typer.Option("--home", help="Storage root (default $DSH_HOME or ~/.dsh).")] = None,
    timeout: Annotated[Optional[float], typer.Option("--timeout", help="Stop the agents after this many seconds.")] = None,
    record: Annotated[Optional[Path], typer.Option("--record", help="Record the live provider's replies as a transcript.")] = None,
    resume: Annotated[Optional[str], typer.Option("--resume", help="Finish this root session's tree after a stop or crash, then run TASK if given.")] = None,
    max_children: Annotated[Optional[int], typer.Option("--max-children", min=0, help="Children spawned per run (default limits.maxChildren, 200).")] = None,
    max_requests: Annotated[Optional[int], typer.Option("--max-requests", min=1, help="Model requests per run (default limits.maxRequests, 2000).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="Tokens per run, input + output (default limits.maxTokens, 2000000).")] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each model request and reply to stderr (as DSH_LOG=debug); never the API key.")] = False,
) -> None:
    """Run one agent tree until it is quiet; print the root's answer."""
    import asyncio
    import signal

    from dsh.loader.config import compose
    from dsh.loader.errors import ConfigError, DshError
    from dsh.loader.headless import RunRequest, RunSinks, run_tree
    from dsh.loader.texts import TEXTS
    from dsh.loader.transcripts import load_transcript

    if task is None and transcript is None and resume is None:
        fail("give a TASK or --transcript NAME", 2)
    if record is not None and transcript is not None:
        fail("--record records a live run; it cannot be combined with --transcript", 2)
    if record is not None and resume is not None and task is None:
        fail("--record with --resume needs the TASK to record", 2)
    try:
        script = load_transcript(transcript) if transcript is not None else None
        if script is not None:
            from dsh.loader.tools import lint_transcript

            lint_transcript(script)
        if script is not None and task is not None:
            fail("give either TASK or --transcript (whose task is used), not both", 2)
        composed = compose(profile=profile, overlays=overlay or [], transcript=script)
    except DshError as exc:
        fail(exc.message, 2)
    config = composed.config
    overrides = {name: value for name, value in (("max_children", max_children), ("max_requests", max_requests),
                                                 ("max_tokens", max_tokens)) if value is not None}
    if overrides:  # the command line outranks every config layer (issue 15 finding 9)
        config = config.model_copy(update={"limits": config.limits.model_copy(update=overrides)})
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
        sinks.on_event = lambda sid, event: emit({"type": "event", "sessionId": sid, "event": event})
        sinks.on_lifecycle = emit
    if sys.stderr.isatty():
        sinks.on_progress = _progress_printer()

    received: list[int] = []

    async def main() -> Any:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal(signum: int) -> None:
            if received:
                os._exit(130 if received[0] == signal.SIGINT else 143)  # second signal: now
            received.append(signum)
            warn(TEXTS["T-CLI-SIGINT"])
            stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal, signum)
        request = RunRequest(
            home=resolve_writable_home(home), config=config, task=task, transcript=script,
            fences_allowed=composed.fences_allowed, timeout=timeout, resume=resume, stop=stop,
            serve_control=True, sinks=sinks, record=record, overlays=list(overlay or []),
        )
        return await run_tree(request)

    from dsh.cli.logsetup import log_level, log_to_stderr

    key_env = config.model.api_key_env
    try:
        with log_to_stderr(log_level(verbose, os.environ), [os.environ.get(key_env, "")] if key_env else []):
            result = asyncio.run(main())
    except ConfigError as exc:
        fail(exc.message, 2)
    except DshError as exc:  # an unsafe home or session file is the user's to fix: exit 2 (issue 15)
        fail(f"{exc.message} [{exc.code}]", 2 if exc.code == "SESSION_UNSAFE" else 1)
    # Precedence (§17.3): a signal's 130 / 143 outranks the stop reason, in the record as in the exit.
    exit_code = (130 if received[0] == signal.SIGINT else 143) if received else result.exit_code
    if json_output:
        emit({**result.to_json(), "exitCode": exit_code})
    else:
        try:
            say(result.output)
        except BrokenPipeError:
            _drop_stdout()
    for v in result.violations:
        warn(f"dsh: {v['code']}" + (f" [{v['agent']}]" if v.get("agent") else "") + f": {v.get('message', '')}")
    if result.stop_reason == "error" and result.error:
        from dsh.loader.texts import render

        warn(render("T-CLI-ROOT-ERROR", code=result.error.get("code"), message=result.error.get("message")))
    raise typer.Exit(exit_code)


def _drop_stdout() -> None:
    """The reader closed stdout (`dsh run --json | head`): send the rest to /dev/null, so the run
    finishes with its own exit code instead of a traceback per event and one more at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real descriptor (an in-process runner): nothing to redirect
        pass


def _progress_printer() -> Any:
    from rich.console import Console  # deferred; rich honours NO_COLOR

    console = Console(stderr=True, highlight=False)
    return lambda line: console.print(line, markup=False)
