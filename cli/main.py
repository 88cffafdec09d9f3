"""The `dsh` command (SPEC §19), composed from one module per command group.

Command modules import only typer and the stdlib at module level; the runtime, pydantic, httpx and
ruamel.yaml load inside the command that needs them, so `dsh --help` and `dsh interrupt` start fast.
"""

from __future__ import annotations

from typing import Annotated

import typer

from cli import config_cmd, control, flow, run, sessions

app = typer.Typer(
    name="dsh",
    help="Run agent trees headlessly; talk to and interrupt their background subagents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"dsh {version('dsh')}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """dsh: a headless agent runtime."""


app.command("run")(run.run)
app.command("interrupt")(control.interrupt)
app.command("send")(control.send)
app.command("flow")(flow.flow)
app.add_typer(sessions.app, name="sessions")
app.add_typer(config_cmd.app, name="config")
