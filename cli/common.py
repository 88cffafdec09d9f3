"""Shared CLI plumbing: the home directory, and turning typed errors into one line plus an exit code.

Stdlib only at module level: `cli.fastpath` runs `dsh interrupt` through here without typer, which
`fail` imports only when it fails (under the Typer app it is loaded already).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

__all__ = ["fail", "resolve_home", "resolve_writable_home", "say", "warn"]


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
