"""Shared CLI plumbing: the home directory, and turning typed errors into one line plus an exit code.

Stdlib only at module level: `cli.fastpath` runs `dsh interrupt` through here without typer, which
`fail` imports only when it fails (under the Typer app it is loaded already).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

if TYPE_CHECKING:
    from dsh.loader.config import TemporalConfig

__all__ = ["fail", "resolve_home", "resolve_writable_home", "say", "temporal_settings", "warn"]


def resolve_home(home: Path | None) -> Path:
    """`--home` wins, then `$DSH_HOME`, then `~/.dsh` (§5.1). A home that exists but is not a
    directory is refused here, in one line with exit 2, before any command looks inside it."""
    from dsh.loader.homedir import HomeUnusable, check_home_readable  # stdlib-only

    if home is None:
        env = os.environ.get("DSH_HOME")
        home = Path(env) if env else Path.home() / ".dsh"
    try:
        return check_home_readable(home)
    except HomeUnusable as exc:
        fail(exc.message, 2)


def resolve_writable_home(home: Path | None) -> Path:
    """`resolve_home` for a command that writes (`dsh run`): a home it cannot write under is refused
    in one line with exit 2 instead of an `OSError` from the store."""
    from dsh.loader.homedir import HomeUnusable, check_home_writable

    try:
        return check_home_writable(resolve_home(home))
    except HomeUnusable as exc:
        fail(exc.message, 2)


def temporal_settings(given: TemporalConfig | None = None) -> TemporalConfig:
    """The `temporal` section (`given`, else composed) for a command that talks to the server, the
    engine importable; else one line and exit 2: the configuration's problem, or the missing
    `dsh[temporal]` extra (`T-ENGINE-NOT-INSTALLED`). After it the caller imports `loader.engines`."""
    from dsh.loader.config import compose
    from dsh.loader.errors import DshError

    try:
        temporal = given or compose().config.temporal
        import dsh.loader.engines.client  # noqa: F401  (temporalio, the extra's dependency)
    except DshError as exc:
        fail(exc.message, 2)
    except ImportError:
        from dsh.loader.texts import render

        fail(render("T-ENGINE-NOT-INSTALLED"), 2)
    return temporal


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def fail(message: str, code: int = 2) -> NoReturn:
    """One clear line on stderr and the documented exit code; never a traceback for bad input."""
    # Every line is prefixed, so a tool or a person grepping for `dsh:` sees each problem (issue 11).
    warn("\n".join(line if line.startswith("dsh: ") else f"dsh: {line}" for line in message.splitlines() or [""]))
    from typer import Exit  # deferred (see the module docstring)

    raise Exit(code)
