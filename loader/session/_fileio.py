"""The file I/O seam of the JSONL store (SPEC §5.4): `StoreIO`, the real `FileIO`, `append_batch`
and `append_held`.

Every append and truncation of a session file goes through a `StoreIO`. The truncate-on-failure rule
lives in `append_batch`, not in the IO object, so a test double that overrides `FileIO.write` to raise
(optionally after writing part of the data) exercises the real recovery path:

    class FailingIO(FileIO):
        def write(self, path, data, fsync):
            raise OSError("disk full")

    store = SessionStore(home, io=FailingIO())   # the public, stable way to install a double

Invariant: after `append_batch` returns or raises, the file is exactly `committed` bytes (the last
size the store saw succeed) plus, on success, the whole batch: no seq is ever duplicated or skipped.

Atomic session creation (`create_session_file`) lives in `_create.py`; this module keeps what it
shares with the load path: `CREATE_STEPS` (the seam's step names), `blocking_call`, `check_dirs`,
`lock_exclusive`, `open_regular`, `write_all`.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path
from collections.abc import Callable
from typing import Any, Literal, Protocol, TypeVar

from dsh.loader.errors import SessionError
from dsh.loader.homedir import unsafe_dir_problem
from dsh.loader.session._syncgroup import sync_targets
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
"""The system calls of `_create.create_session_file`, in order (`fsync-*` only with `persistence.fsync`)."""


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
