"""Atomic session creation (SPEC §5.4 item 1, SPEC §26 item 2, issue 9; issue 15's directory checks).

Rule "a session file appears complete or not at all": `create_session_file` writes the header to a
temp file (`TEMP_PREFIX` + random) in the session directory, locks it, fsyncs it when asked, then
publishes it with `link(temp, session.jsonl)` — a hard link fails with EEXIST, so a real collision
is still `SESSION_EXISTS` and the flock taken on the temp file's inode is already held on the final
file — and finally unlinks the temp name and fsyncs the directory. A kill at any point leaves either
a complete `session.jsonl` or a directory without one (perhaps holding a temp file): "never
materialized" (`SESSION_UNMATERIALIZED`, see `repair.read`), which `prune` removes.
`StoreIO.create_step` is called before each system call of that sequence, so a test can fail any
of them or copy the directory to see what a kill there would leave.

Per session (issue 13) the system calls are: `mkdir` (ancestors only when it fails with ENOENT),
`lstat` of home and `sessions/` in a store's first creation only, `lstat` of the session directory
and of the final name only when the directory already existed, `open(O_CREAT|O_EXCL|O_NOFOLLOW)`, `flock`, `write`, `link`, `unlink`,
and with fsync the two group syncs (`_syncgroup`).
"""

from __future__ import annotations

import asyncio
import fcntl
import itertools
import logging
import os
import secrets
from pathlib import Path

from dsh.loader.errors import SessionError
from dsh.loader.session._fileio import (
    DIR_MODE,
    FILE_MODE,
    TEMP_PREFIX,
    StoreIO,
    blocking_call,
    check_dirs,
    write_all,
)
from dsh.loader.session._syncgroup import SyncGroup
from dsh.loader.texts import render

__all__ = ["create_session_file"]

logger = logging.getLogger("dsh.loader.session._fileio")  # its log name before the split

_CREATE_ATTEMPTS = 5  # a concurrent `prune` may remove our directory before we publish: start over
# A temp name unique across processes (random per process) and within one (a serial): no random
# bytes from the kernel per child (issue 13). `O_EXCL` still refuses a name that exists.
_PROCESS_TOKEN = secrets.token_hex(8) + "-"
_serial = itertools.count()


class _Vanished(Exception):
    """Our unpublished directory or temp file was removed under us (a concurrent `prune`)."""


async def create_session_file(
    io: StoreIO, path: Path, line: bytes, fsync: bool, session_id: str, sync: SyncGroup, *, inline: bool,
    parents_checked: bool = False,
) -> int:
    """Publish `path` holding exactly the header `line`; return its descriptor, flock held (§5.4).

    Raises `SESSION_EXISTS` if `path` exists. The lock is taken on our own fresh temp file, so it can
    only be busy if a prune holds it; then, as when a prune removed the directory or the temp file
    before we published, creation starts over (up to `_CREATE_ATTEMPTS` times). On failure nothing
    we created stays behind except directories (an empty directory reads as never materialized, the
    same as a kill would leave it).

    The two syncs (the header before any name points at it, the directory entries after the link)
    go through the store's `SyncGroup`, so all creations of one loop iteration share them (issue
    13). The system calls between them run in a worker thread, or inline under replay (`inline`).
    `parents_checked`: home and `sessions/` passed issue 15's check in an earlier creation of the
    same store, so only the session's own directory is checked (and not even that when this call
    made it, 0700: issue 13, two `lstat`s per child).
    """
    for _ in range(_CREATE_ATTEMPTS - 1):
        try:
            return await _create_once(io, path, line, fsync, session_id, sync, inline, parents_checked)
        except _Vanished:
            logger.info("session %s: directory changed during creation; starting over", session_id)
    try:
        return await _create_once(io, path, line, fsync, session_id, sync, inline, parents_checked)
    except _Vanished as exc:
        raise OSError(f"session {session_id}: {path.parent} keeps vanishing during creation") from exc


async def _create_once(
    io: StoreIO, path: Path, line: bytes, fsync: bool, session_id: str, sync: SyncGroup, inline: bool,
    parents_checked: bool,
) -> int:
    directory = path.parent
    if inline:  # replay runs: the calls themselves, no coroutine or undo closures (issue 13)
        fd, temp = _prepare(io, path, line, session_id, parents_checked)
    else:
        fd, temp = await blocking_call(False, _prepare, io, path, line, session_id, parents_checked,
                                       orphan=lambda r: _discard(r[0], r[1]))
    published = False
    ours = True  # False once a cancelled thread owns the cleanup (`_blocking`'s orphan)
    try:
        if fsync:
            io.create_step("fsync-temp", directory)
            await sync.sync(fds=[fd])  # the header is durable before any name points at it
        try:
            if inline:
                _link(io, path, temp, session_id)
            else:
                await blocking_call(False, _link, io, path, temp, session_id,
                                    orphan=lambda _: _discard(fd, temp, path), orphan_failed=lambda: _discard(fd, temp))
        except asyncio.CancelledError:
            ours = False
            raise
        published = True
        if fsync:
            io.create_step("fsync-dir", directory)
            await sync.sync(dirs=[directory, directory.parent])
    except BaseException:
        if ours:
            _discard(fd, temp, path if published else None)
        raise
    return fd


def _discard(fd: int, temp: str, published: Path | None = None) -> None:
    """Undo an unfinished creation: ours and locked, so nobody has seen it as live yet."""
    if published is not None:
        published.unlink(missing_ok=True)
    try:
        os.unlink(temp)
    except FileNotFoundError:
        pass
    os.close(fd)


def _make_dir(io: StoreIO, directory: Path) -> bool:
    """Create the session directory 0700; True when this call created it. Only when its parent is
    missing are the missing ancestors made (0700 too): the common case is one `mkdir`, without the
    `is_dir` of the parent first (issue 13: one `stat` per child)."""
    io.create_step("mkdir", directory)
    try:
        os.mkdir(directory, DIR_MODE)
        return True
    except FileExistsError:
        return False
    except FileNotFoundError:
        pass
    missing = [d for d in directory.parents if not d.exists()]
    for d in reversed(missing):  # every directory we create is 0700, parents included
        io.create_step("mkdir", d)
        try:
            os.mkdir(d, DIR_MODE)
        except FileExistsError:
            pass
    try:
        os.mkdir(directory, DIR_MODE)
        return True
    except FileExistsError:
        return False


def _prepare(io: StoreIO, path: Path, line: bytes, session_id: str, parents_checked: bool) -> tuple[int, str]:
    """Directory, locked temp file holding the header (not yet synced); cleans up after itself."""
    directory = path.parent
    fresh = _make_dir(io, directory)
    if not parents_checked:
        sessions = directory.parent
        check_dirs(sessions.parent, sessions)  # home, sessions/ (issue 15)
    # A directory this call just made is ours, 0700, and holds no `session.jsonl`: skip both
    # `lstat`s (issue 13). A name made there since by someone else still fails the `link` below
    # with EEXIST: SESSION_EXISTS. An existing directory is checked (issue 15).
    if not fresh:
        check_dirs(directory)
        if os.path.lexists(path):
            raise SessionError("SESSION_EXISTS", render("R-SESSION-EXISTS", id=session_id))
    temp = f"{directory}/{TEMP_PREFIX}{_PROCESS_TOKEN}{next(_serial)}"  # a str: no `Path` per child (issue 13)
    io.create_step("open-temp", directory)
    # O_APPEND: the store writes every later batch through this descriptor (`FileIO.attach`).
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(temp, flags, FILE_MODE)
    except (FileNotFoundError, FileExistsError) as exc:  # gone, or the name taken: start over, next name
        raise _Vanished() from exc
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:  # only a prune opens a temp file it did not make
            raise _Vanished() from exc
        io.create_step("write-header", directory)
        write_all(fd, line)
    except BaseException:
        _discard(fd, temp)
        raise
    return fd, temp


def _link(io: StoreIO, path: Path, temp: str, session_id: str) -> None:
    """Publish the temp file under its final name (EEXIST keeps `SESSION_EXISTS`), drop the temp name."""
    directory = path.parent
    io.create_step("link", directory)
    try:
        os.link(temp, path, follow_symlinks=False)
    except FileExistsError as exc:
        raise SessionError("SESSION_EXISTS", render("R-SESSION-EXISTS", id=session_id)) from exc
    except FileNotFoundError as exc:  # a prune removed the temp file before we locked it
        raise _Vanished() from exc
    try:
        io.create_step("unlink-temp", directory)
        os.unlink(temp)
    except BaseException:
        path.unlink(missing_ok=True)  # ours and locked: nobody has seen it as live yet
        raise
