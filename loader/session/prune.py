"""Removing saved session trees (`dsh sessions prune --older-than`, issue 11 item 4).

The caller picks the trees (by age, never one whose run answers its socket); this module removes a
tree's session directories all or nothing, with the guards of `unmaterialized.py`:
- never a locked session: every file of every directory of the tree is flocked (non-blocking)
  first; a live store holds the lock on its `session.jsonl` (§5.4), so one busy file keeps the
  whole tree. Holding the locks while unlinking also makes a concurrent `dsh run --resume` of the
  tree fail with `SESSION_BUSY` instead of loading a file that is about to vanish.
- never follows symlinks: directories are opened with `O_NOFOLLOW` and worked on through their
  descriptors; a symlinked directory is skipped.
- only what dsh writes: a directory holding anything but `session.jsonl` and creation temp files
  keeps its tree, reported as `kept-foreign`.
A tree goes as a whole because a parent refers to its children by id (`send_message` reloads them)
and a child names its parent for routing: removing part of a tree breaks the rest.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from dsh.loader.session._fileio import SESSION_FILE, TEMP_PREFIX
from dsh.loader.session.unmaterialized import Action, PruneOutcome

__all__ = ["prune_tree"]

logger = logging.getLogger(__name__)


def prune_tree(sessions_dir: Path, session_ids: list[str], *, dry_run: bool = False) -> list[PruneOutcome]:
    """Remove (or with `dry_run` report) every directory of one tree; one outcome per directory,
    all `removed` / `would-remove`, or all kept with the reason of the first that must stay."""
    parent_fd = os.open(sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    dirs: dict[str, int] = {}
    locks: list[int] = []
    names: dict[str, list[str]] = {}
    try:
        kept = _open_and_lock(parent_fd, session_ids, dirs, locks, names)
        if kept is not None:
            sid, action, detail = kept
            return [PruneOutcome(s, sessions_dir / s, action, detail if s == sid else "") for s in session_ids]
        if dry_run:
            return [PruneOutcome(s, sessions_dir / s, "would-remove") for s in dirs]
        outcomes = []
        for sid, dir_fd in dirs.items():
            for name in names[sid]:
                try:
                    os.unlink(name, dir_fd=dir_fd)
                except FileNotFoundError:
                    pass
        for fd in locks:
            os.close(fd)
        locks.clear()
        for sid in dirs:
            try:
                os.rmdir(sid, dir_fd=parent_fd)
            except OSError as exc:
                logger.info("prune: kept %s: %s", sessions_dir / sid, exc)
                outcomes.append(PruneOutcome(sid, sessions_dir / sid, "kept-changed"))
                continue
            logger.info("prune: removed session directory %s", sessions_dir / sid)
            outcomes.append(PruneOutcome(sid, sessions_dir / sid, "removed"))
        return outcomes
    finally:
        for fd in [*locks, *dirs.values()]:
            os.close(fd)
        os.close(parent_fd)


def _open_and_lock(
    parent_fd: int, session_ids: list[str], dirs: dict[str, int], locks: list[int], names: dict[str, list[str]]
) -> tuple[str, Action, str] | None:
    """Open and lock the whole tree; the first reason to keep it, or None when all is held."""
    for sid in session_ids:
        try:
            dirs[sid] = os.open(sid, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        except FileNotFoundError:
            continue  # gone meanwhile: nothing to remove
        except OSError:  # a symlink (ELOOP / ENOTDIR): not ours to touch
            return sid, "kept-foreign", sid
        names[sid] = []
        with os.scandir(dirs[sid]) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False) or not (
                    entry.name == SESSION_FILE or entry.name.startswith(TEMP_PREFIX)
                ):
                    return sid, "kept-foreign", entry.name
                names[sid].append(entry.name)
        for name in names[sid]:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dirs[sid])
            except FileNotFoundError:
                continue
            locks.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return sid, "kept-live", ""
    return None
