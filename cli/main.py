"""The `dsh` console script (`entry`) and its last line of defence (`guard`); stdlib only.

The Typer app lives in `cli.app` and is built only when a command needs it: `entry` first asks
`cli.fastpath` whether the argument vector is one it answers alone (`--version`, and `interrupt` /
`send` with their two or three arguments), so stopping a child from another terminal pays for neither
typer nor pydantic (issue 13). `from dsh.cli.main import app` still works (module `__getattr__`).

`guard` is issue 15 item 6. Every expected failure is a typed error that a command turns into one
line and a documented exit code; anything else is a dsh bug, and the user gets
`dsh: internal error: <type>: <message>`, the path of a private (0600) file holding the traceback,
and exit 1, or the traceback itself with `DSH_DEBUG=1`.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not `typing.TYPE_CHECKING`: `dsh --version` does not import typing at all
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, TextIO

    from typer import Typer

__all__ = ["DEBUG_ENV", "INTERNAL_ERROR_EXIT", "app", "entry", "guard"]

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
    """The `dsh` console script: the fast path when it applies, else the Typer app; then a prompt exit."""
    from dsh.cli import fastpath

    fastpath.pause_gc()  # until the command has imported what it needs (cli.fastpath.started)
    call = fastpath.plan(sys.argv[1:], os.environ)
    if call is None:
        from dsh.cli.app import app

        call = app
    try:
        guard(call)
    except SystemExit as exc:
        fastpath.exit_promptly(exc)
        raise


def __getattr__(name: str) -> Any:
    if name == "app":  # the Typer app, built on first use (tests and `python -c` callers)
        from dsh.cli.app import app

        return app
    raise AttributeError(f"module 'dsh.cli.main' has no attribute {name!r}")


if TYPE_CHECKING:
    app: Typer
