"""`dsh run` (SPEC §17, §19): its Typer declaration; the work is `cli.run_command.run_command`.

Exit codes (§17.3): 0 completed, 1 error/violations/internal/run budget exhausted, 2 usage or configuration, 3 max-tokens,
4 aborted, 5 refusal, 130 SIGINT, 143 SIGTERM; precedence 130/143 > 2 > violations > stop reason.
The runtime is imported inside the command: `dsh --help` never pays for it. A plain `dsh run` does not
come here at all: `cli.fastpath` calls `run_command` itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dsh.cli.flags import (
    AppendSystemPromptOption,
    EngineOption,
    MaxChildrenOption,
    MaxRequestsOption,
    MaxStepsOption,
    MaxTokensOption,
    ModelOption,
    ParkedOption,
)
from dsh.cli.helptext import HOME_DEFAULT, PROFILE_DEFAULT, default
from dsh.cli.run_command import run_command


def run(
    task: Annotated[Optional[str], typer.Argument(
        metavar="TASK", help="The task for the root agent; '-' reads it from stdin.")] = None,
    profile: Annotated[Optional[str], typer.Option(
        "--profile", metavar="NAME", help="Profile name or path." + default(PROFILE_DEFAULT))] = None,
    overlay: Annotated[Optional[list[str]], typer.Option(
        "--overlay", metavar="NAME", help="Overlay name or path (repeatable); applied after the profile." + default("none"))] = None,
    transcript: Annotated[Optional[str], typer.Option(
        "--transcript", metavar="NAME", help="Replay a keyless transcript (name or path) instead of a live model.")] = None,
    json_output: Annotated[bool, typer.Option(
        "--json", help="NDJSON records (init, events, lifecycle, retry, waiting, result) on stdout.")] = False,
    home: Annotated[Optional[Path], typer.Option(
        "--home", metavar="DIR", help="Storage root." + default(HOME_DEFAULT))] = None,
    timeout: Annotated[Optional[float], typer.Option(
        "--timeout", metavar="SECONDS", help="Stop the agents after this many seconds (exit 4)." + default("no limit"))] = None,
    record: Annotated[Optional[Path], typer.Option(
        "--record", metavar="FILE", help="Record the live provider's replies as a transcript; refuses to "
        "overwrite FILE without --force.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Let --record overwrite an existing FILE.")] = False,
    resume: Annotated[Optional[str], typer.Option(
        "--resume", metavar="SESSION_ID", help="Finish this root session's tree ('last': the newest root in the "
        "home) after a stop or crash, then run TASK if given.")] = None,
    output_last_message: Annotated[Optional[Path], typer.Option(
        "--output-last-message", metavar="FILE", help="Also write the root's final answer to FILE.")] = None,
    model: ModelOption = None,
    append_system_prompt: AppendSystemPromptOption = None,
    max_steps: MaxStepsOption = None,
    parked: ParkedOption = None,
    max_children: MaxChildrenOption = None,
    max_requests: MaxRequestsOption = None,
    max_tokens: MaxTokensOption = None,
    engine: EngineOption = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log each model request and reply to stderr (as DSH_LOG=debug); never the API key.")] = False,
    quiet: Annotated[bool, typer.Option(
        "--quiet", "-q", help="No live tree on stderr (it is drawn only when stderr is a TTY; warnings and "
        "errors still print).")] = False,
) -> None:
    """Run one agent tree until it is quiet; print the root's answer."""
    raise typer.Exit(run_command(
        task, profile=profile, overlay=overlay, transcript=transcript, json_output=json_output, home=home,
        timeout=timeout, record=record, force=force, resume=resume, output_last_message=output_last_message,
        model=model, append_system_prompt=append_system_prompt, max_steps=max_steps, parked=parked,
        max_children=max_children, max_requests=max_requests, max_tokens=max_tokens, engine=engine, verbose=verbose,
        quiet=quiet,
    ))
