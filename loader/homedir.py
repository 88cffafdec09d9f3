"""Checking the storage root (`--home`, `$DSH_HOME`, `~/.dsh`; SPEC §5.1) before a command uses it.

Issue 15 item 5: a regular file given as `--home`, or a home the user cannot write, used to surface
as an `OSError` traceback from deep inside the store. The CLI calls these checks first, so the answer
is one line naming the path and what to do, and exit 2:

- `check_home_readable`: the home may be missing (nothing saved yet), but if it exists it is a
  directory; read-only commands need nothing more, so they still work on a read-only home.
- `check_home_writable`: additionally the home, and its `sessions/` and `run/` when they exist, are
  directories this process may write and enter; a missing home needs a writable nearest existing
  ancestor, since the store will create it.

Ownership and mode checks on these directories (issue 15 item 1) belong to the store, which opens
them; these checks only turn the common mistakes into a clear refusal. Stdlib only.
"""

from __future__ import annotations

import os
from pathlib import Path

from loader.errors import DshError
from loader.texts import render

__all__ = ["HomeUnusable", "check_home_readable", "check_home_writable"]

_SUBDIRS = ("sessions", "run")


class HomeUnusable(DshError):
    """The home cannot serve this command; nothing was written (CLI exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("HOME_UNUSABLE", message)


def check_home_readable(home: Path) -> Path:
    """`home` unchanged, or `HomeUnusable` when it exists and is not a directory."""
    if os.path.lexists(home) and not home.is_dir():
        raise HomeUnusable(render("T-CLI-HOME-NOT-DIR", path=home))
    return home


def check_home_writable(home: Path) -> Path:
    """`home` unchanged, or `HomeUnusable` when a write under it would fail (rules above)."""
    check_home_readable(home)
    if not home.is_dir():
        ancestor = _nearest_existing(home)
        if not ancestor.is_dir():
            raise HomeUnusable(render("T-CLI-HOME-NOT-DIR", path=ancestor))
        _require_writable(ancestor)
        return home
    _require_writable(home)
    for name in _SUBDIRS:
        sub = home / name
        if not os.path.lexists(sub):
            continue
        if not sub.is_dir():
            raise HomeUnusable(render("T-CLI-HOME-NOT-DIR", path=sub))
        _require_writable(sub)
    return home


def _nearest_existing(path: Path) -> Path:
    current = path.absolute()
    while not os.path.lexists(current) and current != current.parent:
        current = current.parent
    return current


def _require_writable(directory: Path) -> None:
    if not os.access(directory, os.W_OK | os.X_OK):
        raise HomeUnusable(render("T-CLI-HOME-READ-ONLY", path=directory))
