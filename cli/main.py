"""The `dsh` command (SPEC §19). Commands import the runtime lazily to keep start-up fast."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    name="dsh",
    help="Run agent trees headlessly; talk to and interrupt their background subagents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"dsh: {message}", err=True)
    raise typer.Exit(code)


@app.callback()
def main() -> None:
    """dsh: a headless agent runtime."""


@app.command()
def run(
    task: Annotated[Optional[str], typer.Argument(help="The task for the root agent.")] = None,
    transcript: Annotated[
        Optional[str], typer.Option("--transcript", help="Replay a keyless transcript (name or path).")
    ] = None,
    home: Annotated[Optional[Path], typer.Option("--home", help="Storage root (default ~/.dsh).")] = None,
) -> None:
    """Run one agent tree until it is quiet; print the root's answer."""
    import asyncio
    import os

    from loader.errors import DshError  # deferred: pulls in the runtime
    from loader.headless import run_tree

    if transcript is None:
        _fail("a live provider is not available yet; use --transcript NAME")
    if task is not None:
        _fail("give either TASK or --transcript (whose task is used), not both")
    root = home or Path(os.environ.get("DSH_HOME") or Path.home() / ".dsh")
    try:
        result = asyncio.run(run_tree(transcript=transcript, home=root))
    except DshError as exc:
        _fail(exc.message, 2)
    else:
        sys.stdout.write(result.output + "\n")
        sys.stdout.flush()
        for v in result.violations:
            typer.echo(f"dsh: {v['code']}: {v.get('message', '')}", err=True)
        if result.stop_reason == "error" and result.error:
            typer.echo(f"dsh: root turn failed [{result.error.get('code')}]: {result.error.get('message')}", err=True)
        raise typer.Exit(result.exit_code)
