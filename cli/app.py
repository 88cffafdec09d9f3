"""The `dsh` Typer app (SPEC §19), composed from one module per command group.

Command modules import only typer and the stdlib at module level; the runtime, pydantic, httpx and
ruamel.yaml load inside the command that needs them, so `dsh --help` starts fast. The console script
is `cli.main:entry`, which reaches this app only for what `cli.fastpath` does not answer itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from dsh.cli import config_cmd, control, fastpath, flow, run, sessions
from dsh.cli.helptext import EPILOGS, HOME_DEFAULT, default

app = typer.Typer(
    name="dsh",
    help="Run agent trees headlessly; talk to and interrupt their background subagents.",
    epilog=EPILOGS["dsh"],
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain pages: bare flags, no rich import for --help (cli.helptext)
)


HomeOption = Annotated[Optional[Path], typer.Option(
    "--home", metavar="DIR", help="Storage root." + default(HOME_DEFAULT))]
AddressArgument = Annotated[str, typer.Argument(
    metavar="ADDRESS", help="<parentSessionId>/<childSessionId>, as the live tree and `sessions tree` show it.")]


def _version(value: bool) -> None:
    if value:
        typer.echo(fastpath.version_line())
        raise typer.Exit(0)


@app.callback()
def main(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
) -> None:
    """dsh: a headless agent runtime."""
    if ctx.invoked_subcommand != "run":  # `dsh run` imports the runtime first, then says so itself
        fastpath.started()


app.command("run", epilog=EPILOGS["run"])(run.run)


@app.command("interrupt", epilog=EPILOGS["interrupt"])
def interrupt(address: AddressArgument, home: HomeOption = None) -> None:
    """Stop a background subagent's current turn; its queued messages are kept."""
    control.interrupt(address, home)


@app.command("send", epilog=EPILOGS["send"])
def send(
    address: AddressArgument,
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="The message for the subagent.")],
    home: HomeOption = None,
) -> None:
    """Queue a follow-up for a background subagent of a live run; prints the message id."""
    control.send(address, message, home)


app.command("flow", epilog=EPILOGS["flow"])(flow.flow)
app.add_typer(sessions.app, name="sessions")
app.add_typer(config_cmd.app, name="config")
