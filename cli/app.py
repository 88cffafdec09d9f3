"""The `dsh` Typer app (SPEC §19), composed from one module per command group.

Command modules import only typer and the stdlib at module level; the runtime, pydantic, httpx and
ruamel.yaml load inside the command that needs them, so `dsh --help` starts fast. The console script
is `cli.main:entry`, which reaches this app only for what `cli.fastpath` does not answer itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from dsh.cli import config_cmd, control, fastpath, flow, run, sessions, worker
from dsh.cli.helptext import EPILOGS, HOME_DEFAULT, default



class DshGroup(TyperGroup):
    """The top-level group: click's own usage errors become `dsh:` lines too (issue 11 item 5).

    `main` runs the group without click's standalone error handling and answers what click would
    have: a usage error (exit 2) or another click error as `dsh:` lines on stderr, every line
    prefixed; an abort as `dsh: aborted` (exit 1); `typer.Exit(n)` and success as exit n / 0."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        def run() -> Any:
            return super(DshGroup, self).main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )

        if not standalone_mode:
            return run()
        try:
            code = run()
        except typer.Abort:
            sys.stderr.write("dsh: aborted\n")
            sys.exit(1)
        except typer.TyperException as exc:  # click's errors (typer vendors click; this is their base)
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]  # `dsh` alone: the help page, as before
            else:
                sys.stderr.write("".join(f"dsh: {line}\n" for line in _error_lines(exc)))
            sys.exit(getattr(exc, "exit_code", 1))
        sys.exit(code if isinstance(code, int) else 0)


def _error_lines(exc: Exception) -> list[str]:
    """Click's message, then (for a usage error) the usage line and where help is, as click shows them."""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    lines = message.splitlines() or [type(exc).__name__]
    ctx = getattr(exc, "ctx", None)
    if ctx is not None:
        lines.append(ctx.get_usage())
        if ctx.command.get_help_option(ctx) is not None:
            lines.append(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.")
    return lines


app = typer.Typer(
    cls=DshGroup,
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
ControlEngineOption = Annotated[Optional[str], typer.Option(
    "--engine", metavar="NAME",
    help="Where the run lives: local (its socket) or temporal (its workflows, through temporal.address). "
    "Default: the socket, then the configured engine.")]


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
def interrupt(address: AddressArgument, home: HomeOption = None, engine: ControlEngineOption = None) -> None:
    """Stop a background subagent's current turn; its queued messages are kept."""
    control.interrupt(address, home, engine)


@app.command("send", epilog=EPILOGS["send"])
def send(
    address: AddressArgument,
    message: Annotated[str, typer.Argument(metavar="MESSAGE", help="The message for the subagent.")],
    home: HomeOption = None,
    engine: ControlEngineOption = None,
) -> None:
    """Queue a follow-up for a background subagent of a live run; prints the message id."""
    control.send(address, message, home, engine)


app.command("flow", epilog=EPILOGS["flow"])(flow.flow)
app.command("worker", epilog=EPILOGS["worker"])(worker.worker)
app.add_typer(sessions.app, name="sessions")
app.add_typer(config_cmd.app, name="config")
