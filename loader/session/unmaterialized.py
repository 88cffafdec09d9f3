"""Session directories that never became sessions (SPEC §5.4 item 1, §26 item 2, issue 9).

Creation is atomic (`_create.create_session_file`), so a kill during it leaves a directory without
`session.jsonl`, perhaps holding the creation's temp file; versions before atomic creation could
leave an empty `session.jsonl`. Such a directory reads as never materialized
(`SESSION_UNMATERIALIZED`): it holds no header, hence no history to lose.

`prune_unmaterialized` removes them, with three guards:
- never a live one: every file in the directory is flocked (non-blocking) before anything is
  removed; a creation in progress holds the lock on its temp file, so its directory is kept. A
  creation that starts over after a prune removed its directory is handled by the creator
  (`create_session_file` retries when its directory or temp file vanishes before it publishes).
- never follows symlinks: the directory is opened with `O_NOFOLLOW` and everything inside it is
  opened, unlinked and removed relative to that descriptor; a symlinked directory is skipped.
- only what dsh writes: a directory holding anything besides temp files and an empty
  `session.jsonl` (subdirectories, symlinks, other files) is kept and reported.
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dsh.loader.ids import is_valid_session_id
from dsh.loader.session._fileio import SESSION_FILE, TEMP_PREFIX

__all__ = ["PruneOutcome", "is_unmaterialized", "prune_unmaterialized", "unmaterialized_ids"]

logger = logging.getLogger(__name__)

Action = Literal["removed", "would-remove", "kept-busy", "kept-foreign", "kept-changed", "kept-live"]
"""`kept-live`: a running dsh holds the session (its lock, or its run's socket answers; prune.py)."""


@dataclass(frozen=True)
class PruneOutcome:
    session_id: str
    path: Path
    action: Action
    detail: str = ""  # for `kept-foreign`, the entry dsh did not write


def is_unmaterialized(session_dir: Path) -> bool:
    """A real (not symlinked) directory whose `session.jsonl` is absent or empty."""
    try:
        if not stat.S_ISDIR(os.lstat(session_dir).st_mode):
            return False
    except OSError:
        return False
    try:
        st = os.lstat(session_dir / SESSION_FILE)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == 0


def unmaterialized_ids(sessions_dir: Path) -> list[str]:
    """Ids (directory names) under `sessions_dir` that read as never materialized, sorted."""
    try:
        names = sorted(os.listdir(sessions_dir))
    except FileNotFoundError:
        return []
    return [n for n in names if is_valid_session_id(n) and is_unmaterialized(sessions_dir / n)]


def prune_unmaterialized(sessions_dir: Path, *, dry_run: bool = False) -> list[PruneOutcome]:
    """Remove (or with `dry_run` only report) every never-materialized session directory."""
    outcomes: list[PruneOutcome] = []
    ids = unmaterialized_ids(sessions_dir)
    if not ids:
        return outcomes
    parent_fd = os.open(sessions_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for session_id in ids:
            outcome = _prune_one(parent_fd, sessions_dir, session_id, dry_run)
            if outcome is not None:
                outcomes.append(outcome)
    finally:
        os.close(parent_fd)
    return outcomes


def _prune_one(parent_fd: int, sessions_dir: Path, session_id: str, dry_run: bool) -> PruneOutcome | None:
    path = sessions_dir / session_id
    try:
        dir_fd = os.open(session_id, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:  # gone meanwhile, or a symlink (ELOOP / ENOTDIR): not ours to touch
        return None
    locks: list[int] = []
    try:
        names: list[str] = []
        with os.scandir(dir_fd) as entries:
            for entry in entries:
                if not entry.is_file(follow_symlinks=False) or not (
                    entry.name == SESSION_FILE or entry.name.startswith(TEMP_PREFIX)
                ):
                    return PruneOutcome(session_id, path, "kept-foreign", entry.name)
                if entry.name == SESSION_FILE and entry.stat(follow_symlinks=False).st_size != 0:
                    return None  # materialized meanwhile
                names.append(entry.name)
        for name in names:
            try:
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
            except FileNotFoundError:
                continue  # its creator removed it (failure path) or published and unlinked it
            locks.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return PruneOutcome(session_id, path, "kept-busy")
        if dry_run:
            return PruneOutcome(session_id, path, "would-remove")
        for name in names:
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
    finally:
        for fd in locks:
            os.close(fd)
        os.close(dir_fd)
    try:
        os.rmdir(session_id, dir_fd=parent_fd)
    except OSError as exc:  # a creation started over inside it, or it was replaced by a symlink
        logger.info("prune: kept %s: %s", path, exc)
        return PruneOutcome(session_id, path, "kept-changed")
    logger.info("prune: removed never-materialized session directory %s", path)
    return PruneOutcome(session_id, path, "removed")
