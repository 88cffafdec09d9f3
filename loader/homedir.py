"""Checking the storage root (`--home`, `$DSH_HOME`, `~/.dsh`; SPEC §5.1) before a command uses it.

Issue 15 item 5: a regular file given as `--home`, or a home the user cannot write, used to surface
as an `OSError` traceback from deep inside the store. The CLI calls these checks first, so the answer
is one line naming the path and what to do, and exit 2:

- `check_home_readable`: the home may be missing (nothing saved yet), but if it exists it is a
  directory; read-only commands need nothing more, so they still work on a read-only home.
- `check_home_writable`: additionally the home, and its `sessions/` and `run/` when they exist, are
  directories this process may write and enter; a missing home needs a writable nearest existing
  ancestor, since the store will create it.

Trusted directories (issue 15 item 1): before any write, the home, `sessions/`, `run/` and each
session directory must be real directories (not symlinks) owned by this uid and writable by nobody
else, or another user could delete, replace or plant sessions. `unsafe_dir_problem` is the one
check; `check_home_writable` applies it to every existing directory of the home, and the store and
the control server apply it again where they open one. Read-only commands skip it, so they still
work on a read-only or shared home. Stdlib only.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dsh.loader.errors import DshError
from dsh.loader.texts import render

__all__ = ["HomeUnusable", "check_home_readable", "check_home_writable", "check_trusted_dir", "unsafe_dir_problem"]

_SUBDIRS = ("sessions", "run")


class HomeUnusable(DshError):
    """The home cannot serve this command; nothing was written (CLI exit 2)."""

    def __init__(self, message: str) -> None:
        super().__init__("HOME_UNUSABLE", message)


def unsafe_dir_problem(path: Path) -> str | None:
    """One line naming `path` and the fix when it is not a directory we alone control, else None
    (also None when it does not exist: whoever creates it makes it 0700)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return render("T-UNSAFE-NOT-DIR", path=path)
    if st.st_uid != os.getuid():
        return render("T-UNSAFE-OWNER", path=path, owner=st.st_uid, uid=os.getuid())
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return render("T-UNSAFE-MODE", path=path)
    return None


def check_trusted_dir(path: Path) -> None:
    """`HomeUnusable` when `unsafe_dir_problem` finds one."""
    problem = unsafe_dir_problem(path)
    if problem is not None:
        raise HomeUnusable(problem)


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
    check_trusted_dir(home)
    for name in _SUBDIRS:
        sub = home / name
        if not os.path.lexists(sub):
            continue
        if not sub.is_dir():
            raise HomeUnusable(render("T-CLI-HOME-NOT-DIR", path=sub))
        _require_writable(sub)
        check_trusted_dir(sub)
    sessions = home / "sessions"
    if sessions.is_dir() and not sessions.is_symlink():
        for entry in sorted(os.scandir(sessions), key=lambda e: e.name):
            if entry.is_symlink() or entry.is_dir(follow_symlinks=False):  # a stray file plants nothing
                check_trusted_dir(Path(entry.path))
    return home


def _nearest_existing(path: Path) -> Path:
    current = path.absolute()
    while not os.path.lexists(current) and current != current.parent:
        current = current.parent
    return current


def _require_writable(directory: Path) -> None:
    if not os.access(directory, os.W_OK | os.X_OK):
        raise HomeUnusable(render("T-CLI-HOME-READ-ONLY", path=directory))
