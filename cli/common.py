"""Shared CLI plumbing: the home directory, and turning typed errors into one line plus an exit code.

Only stdlib and typer at module level: `dsh --help` and `dsh interrupt` must start fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import typer

__all__ = ["fail", "resolve_home", "say", "warn"]


def resolve_home(home: Path | None) -> Path:
    """`--home` wins, then `$DSH_HOME`, then `~/.dsh` (§5.1)."""
    if home is not None:
        return home
    env = os.environ.get("DSH_HOME")
    return Path(env) if env else Path.home() / ".dsh"


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def fail(message: str, code: int = 2) -> NoReturn:
    """One clear line on stderr and the documented exit code; never a traceback for bad input."""
    warn(message if message.startswith("dsh: ") else f"dsh: {message}")
    raise typer.Exit(code)
