"""The `dsh` command (SPEC §19), composed from one module per command group.

Command modules import only typer and the stdlib at module level; the runtime, pydantic, httpx and
ruamel.yaml load inside the command that needs them, so `dsh --help` and `dsh interrupt` start fast.

The console script is `entry`, which runs `app` inside `guard`: the last line of defence of issue 15
item 6. Every expected failure is a typed error that a command turns into one line and a documented
exit code; anything else is a dsh bug, and the user gets `dsh: internal error: <type>: <message>`,
the path of a private (0600) file holding the traceback, and exit 1, or the traceback itself with
`DSH_DEBUG=1`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Annotated, TextIO

import typer

from dsh.cli import config_cmd, control, flow, run, sessions

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


INTERNAL_ERROR_EXIT = 1
DEBUG_ENV = "DSH_DEBUG"


def guard(
    call: Callable[[], object], *, environ: Mapping[str, str] | None = None, stderr: TextIO | None = None
) -> None:
    """Run `call`; turn an unexpected exception into the internal-error answer and `SystemExit(1)`.

    `SystemExit` (typer's own exits) and `KeyboardInterrupt` are not errors and pass through."""
    env = os.environ if environ is None else environ
    out = sys.stderr if stderr is None else stderr
    try:
        call()
    except Exception as exc:
        import traceback  # deferred: only a failing run pays for it

        text = traceback.format_exc()
        summary = " ".join(str(exc).split()) or "(no message)"
        headline = f"dsh: internal error: {type(exc).__name__}: {summary}\n"
        if env.get(DEBUG_ENV) == "1":
            out.write(text + headline)
        else:
            out.write(headline + _saved(text) + "\n")
        out.flush()
        raise SystemExit(INTERNAL_ERROR_EXIT) from None


def _saved(text: str) -> str:
    """Write the traceback to a new 0600 file in the temp directory (mkstemp: never an existing
    file, never readable by others); the home is not used, since it may be what failed."""
    import tempfile

    try:
        fd, path = tempfile.mkstemp(prefix="dsh-internal-error-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text)
    except OSError as exc:
        return f"dsh: the traceback could not be saved ({exc.strerror}); rerun with {DEBUG_ENV}=1 to see it"
    return f"dsh: traceback saved to {path} (rerun with {DEBUG_ENV}=1 to print it)"


def entry() -> None:
    """The `dsh` console script."""
    guard(app)
