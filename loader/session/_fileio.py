"""The file I/O seam of the JSONL store (SPEC §5.4): `StoreIO`, the real `FileIO`, `append_batch`,
and atomic session creation (`create_session_file`).

Every append and truncation of a session file goes through a `StoreIO`. The truncate-on-failure rule
lives in `append_batch`, not in the IO object, so a test double that overrides `FileIO.write` to raise
(optionally after writing part of the data) exercises the real recovery path:

    class FailingIO(FileIO):
        def write(self, path, data, fsync):
            raise OSError("disk full")

    store = SessionStore(home, io=FailingIO())   # the public, stable way to install a double

Invariant: after `append_batch` returns or raises, the file is exactly `committed` bytes (the last
size the store saw succeed) plus, on success, the whole batch: no seq is ever duplicated or skipped.

Rule "a session file appears complete or not at all" (§5.4 item 1, issue 9): `create_session_file`
writes the header to a temp file (`TEMP_PREFIX` + random) in the session directory, locks it, fsyncs
it when asked, then publishes it with `link(temp, session.jsonl)` — a hard link fails with EEXIST, so
a real collision is still `SESSION_EXISTS` and the flock taken on the temp file's inode is already
held on the final file — and finally unlinks the temp name and fsyncs the directory. A kill at any
point leaves either a complete `session.jsonl` or a directory without one (perhaps holding a temp
file): "never materialized" (`SESSION_UNMATERIALIZED`, see `repair.read`), which `prune` removes.
`StoreIO.create_step` is called before each system call of that sequence, so a test can fail any
of them or copy the directory to see what a kill there would leave.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import secrets
import stat
from pathlib import Path
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from dsh.loader.errors import SessionError
from dsh.loader.homedir import unsafe_dir_problem
from dsh.loader.session._syncgroup import SyncGroup, sync_targets
from dsh.loader.texts import render

__all__ = [
    "CREATE_STEPS",
    "TEMP_PREFIX",
    "CreateStep",
    "FileIO",
    "StoreIO",
    "append_batch",
    "append_held",
    "blocking_call",
    "create_session_file",
    "fsync_dir",
    "check_dirs",
    "lock_exclusive",
    "open_regular",
    "write_all",
]

logger = logging.getLogger(__name__)

SESSION_FILE = "session.jsonl"
TEMP_PREFIX = ".session.jsonl.tmp-"
"""A file named so in a session directory is an unpublished header (or a stale link to a published one)."""

DIR_MODE = 0o700
FILE_MODE = 0o600

CreateStep = Literal["mkdir", "open-temp", "write-header", "fsync-temp", "link", "unlink-temp", "fsync-dir"]
CREATE_STEPS: tuple[CreateStep, ...] = (
    "mkdir", "open-temp", "write-header", "fsync-temp", "link", "unlink-temp", "fsync-dir"
)
"""The system calls of `create_session_file`, in order (`fsync-*` only with `persistence.fsync`)."""

_CREATE_ATTEMPTS = 5  # a concurrent `prune` may remove our directory before we publish: start over


class StoreIO(Protocol):
    """Blocking file operations of the store; called from worker threads, one at a time per file."""

    def size(self, path: Path) -> int:
        """Current size of `path` in bytes."""
        ...

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        """Open `path` for append, write all of `data`, fsync when asked. May fail part-way."""
        ...

    def truncate(self, path: Path, size: int, fsync: bool) -> None:
        """Cut `path` back to `size` bytes, fsync when asked."""
        ...

    def create_step(self, step: CreateStep, directory: Path) -> None:
        """Called before each system call of `create_session_file`; raising fails that call."""
        ...

    def attach(self, path: Path, fd: int) -> None:
        """`fd` (opened `O_APPEND`, flock held) is live for `path`: write, size and truncate use it."""
        ...

    def detach(self, path: Path) -> None:
        """`path`'s descriptor is about to be closed; later calls open the path again."""
        ...

    def sync(self, fds: list[int], dirs: list[Path]) -> None:
        """Make the writes to `fds` and the entries of `dirs` durable (one group, `_syncgroup`)."""
        ...


def open_regular(path: Path, flags: int) -> int:
    """`os.open` of a session file that refuses symlinks and anything but a regular file (issue 15
    items 1, 4): `O_NOFOLLOW` keeps a planted link from sending a truncate or append outside the
    home, `O_NONBLOCK` keeps a FIFO from hanging the open, and the check is on the open descriptor,
    so the path cannot be swapped in between. Refusals are `SESSION_UNSAFE`."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SessionError("SESSION_UNSAFE", render("T-UNSAFE-FILE", path=path, kind="a symbolic link")) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a directory" if stat.S_ISDIR(mode) else "a special file"
        raise SessionError("SESSION_UNSAFE", render("T-UNSAFE-FILE", path=path, kind=kind))
    os.set_blocking(fd, True)
    return fd


def check_dirs(*directories: Path) -> None:
    """`SESSION_UNSAFE` unless each existing directory is ours alone (issue 15 item 1); before any write."""
    for directory in directories:
        problem = unsafe_dir_problem(directory)
        if problem is not None:
            raise SessionError("SESSION_UNSAFE", problem)


class FileIO:
    """The real `StoreIO`. Subclass it in tests to inject failures (override `write`).

    A live session's file is written through the descriptor the store holds its flock on (issue 13:
    no stat + open + close per batch, and no path lookup an attacker could redirect). Subclasses
    need not call `__init__`, so the table of held descriptors is created on first use.
    """

    def _held(self) -> dict[Path, int]:
        held: dict[Path, int] | None = self.__dict__.get("_held_fds")
        if held is None:
            held = self.__dict__["_held_fds"] = {}
        return held

    def attach(self, path: Path, fd: int) -> None:
        self._held()[path] = fd

    def detach(self, path: Path) -> None:
        self._held().pop(path, None)

    def size(self, path: Path) -> int:
        fd = self._held().get(path)
        return os.fstat(fd).st_size if fd is not None else os.stat(path).st_size

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        held = self._held().get(path)
        fd = held if held is not None else open_regular(path, os.O_WRONLY | os.O_APPEND)
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            if held is None:
                os.close(fd)

    def truncate(self, path: Path, size: int, fsync: bool) -> None:
        held = self._held().get(path)
        fd = held if held is not None else open_regular(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, size)
            if fsync:
                os.fsync(fd)
        finally:
            if held is None:
                os.close(fd)

    def create_step(self, step: CreateStep, directory: Path) -> None:
        return None

    def sync(self, fds: list[int], dirs: list[Path]) -> None:
        sync_targets(fds, dirs)


def write_all(fd: int, data: bytes) -> None:
    written = os.write(fd, data)  # a regular file takes the whole batch in one write, almost always
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        view = view[os.write(fd, view) :]


def append_batch(
    io: StoreIO, path: Path, data: bytes, fsync: bool, committed: int | None = None, *, defer_sync: bool = False
) -> int:
    """Append `data` as one batch; on failure truncate back and re-raise. Returns the new size.

    `committed` is the size the store last saw succeed; a larger file holds bytes of a write whose
    outcome was never observed (failed truncate, cancelled await), and is cut back before writing.
    With `defer_sync` the write itself is not fsynced (the caller group-commits it, `_syncgroup`);
    truncations still follow `fsync`.
    """
    size = io.size(path)
    if committed is not None and size != committed:
        if size < committed:
            raise OSError(f"{path} shrank from {committed} to {size} bytes")
        logger.warning("%s: dropping %d unconfirmed bytes before writing", path, size - committed)
        io.truncate(path, committed, fsync)
        size = committed
    try:
        io.write(path, data, fsync and not defer_sync)
    except BaseException:
        try:
            io.truncate(path, size, fsync)
        except Exception:
            logger.exception("%s: truncate back to %d bytes failed", path, size)
        raise
    return size + len(data)


def append_held(fd: int, path: Path, data: bytes, fsync: bool, committed: int) -> int:
    """`append_batch(FileIO(), path, data, fsync, committed, defer_sync=True)` for the real
    `FileIO` with `fd` the descriptor it holds for `path`, in one frame (issue 13: the generic path
    is ten calls per batch, three batches per model call). Same invariant: on return or raise the
    file is `committed` bytes plus, on success, the whole batch. A double always takes
    `append_batch`, so its overrides are called."""
    size = os.fstat(fd).st_size
    if size != committed:
        if size < committed:
            raise OSError(f"{path} shrank from {committed} to {size} bytes")
        logger.warning("%s: dropping %d unconfirmed bytes before writing", path, size - committed)
        os.ftruncate(fd, committed)
        if fsync:
            os.fsync(fd)
        size = committed
    try:
        written = os.write(fd, data)
        if written != len(data):
            write_all(fd, data[written:])
    except BaseException:
        try:
            os.ftruncate(fd, size)
            if fsync:
                os.fsync(fd)
        except Exception:
            logger.exception("%s: truncate back to %d bytes failed", path, size)
        raise
    return size + len(data)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_exclusive(fd: int, session_id: str) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        raise SessionError("SESSION_BUSY", render("R-SESSION-BUSY-ELSEWHERE", id=session_id)) from exc


class _Vanished(Exception):
    """Our unpublished directory or temp file was removed under us (a concurrent `prune`)."""


async def create_session_file(
    io: StoreIO, path: Path, line: bytes, fsync: bool, session_id: str, sync: SyncGroup, *, inline: bool
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
    """
    for _ in range(_CREATE_ATTEMPTS - 1):
        try:
            return await _create_once(io, path, line, fsync, session_id, sync, inline)
        except _Vanished:
            logger.info("session %s: directory changed during creation; starting over", session_id)
    try:
        return await _create_once(io, path, line, fsync, session_id, sync, inline)
    except _Vanished as exc:
        raise OSError(f"session {session_id}: {path.parent} keeps vanishing during creation") from exc


async def _create_once(
    io: StoreIO, path: Path, line: bytes, fsync: bool, session_id: str, sync: SyncGroup, inline: bool
) -> int:
    directory = path.parent
    fd, temp = await blocking_call(inline, _prepare, io, path, line, session_id, orphan=lambda r: _discard(r[0], r[1]))
    published = False
    ours = True  # False once a cancelled thread owns the cleanup (`_blocking`'s orphan)
    try:
        if fsync:
            io.create_step("fsync-temp", directory)
            await sync.sync(fds=[fd])  # the header is durable before any name points at it
        try:
            await blocking_call(inline, _link, io, path, temp, session_id, orphan=lambda _: _discard(fd, temp, path),
                            orphan_failed=lambda: _discard(fd, temp))
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


_R = TypeVar("_R")


async def blocking_call(
    inline: bool,
    fn: Callable[..., _R],
    *args: Any,
    orphan: Callable[[_R], None],
    orphan_failed: Callable[[], None] | None = None,
) -> _R:
    """`fn(*args)` inline, or in a thread; if our caller is cancelled meanwhile, `orphan(result)`
    (or `orphan_failed()` when `fn` raised) undoes what the thread did (a thread cannot be cancelled)."""
    if inline:
        return fn(*args)
    future = asyncio.ensure_future(asyncio.to_thread(fn, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:

        def undo(done: asyncio.Future[_R]) -> None:
            if done.cancelled() or done.exception() is not None:
                if orphan_failed is not None:
                    orphan_failed()
            else:
                orphan(done.result())

        future.add_done_callback(undo)
        raise


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


def _prepare(io: StoreIO, path: Path, line: bytes, session_id: str) -> tuple[int, str]:
    """Directory, locked temp file holding the header (not yet synced); cleans up after itself."""
    directory = path.parent
    sessions = directory.parent
    fresh = _make_dir(io, directory)
    check_dirs(sessions.parent, sessions, directory)  # home, sessions/, the session (issue 15)
    # A directory this call just made holds no `session.jsonl`: skip the `lstat` (issue 13). A name
    # made there since by someone else still fails the `link` below with EEXIST: SESSION_EXISTS.
    if not fresh and os.path.lexists(path):
        raise SessionError("SESSION_EXISTS", render("R-SESSION-EXISTS", id=session_id))
    temp = f"{directory}/{TEMP_PREFIX}{secrets.token_hex(8)}"  # a str: no `Path` per child (issue 13)
    io.create_step("open-temp", directory)
    # O_APPEND: the store writes every later batch through this descriptor (`FileIO.attach`).
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(temp, flags, FILE_MODE)
    except FileNotFoundError as exc:
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
