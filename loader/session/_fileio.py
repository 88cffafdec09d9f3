"""The file I/O seam of the JSONL store (SPEC §5.4): `StoreIO`, the real `FileIO`, `append_batch`.

Every append and truncation of a session file goes through a `StoreIO`. The truncate-on-failure rule
lives in `append_batch`, not in the IO object, so a test double that overrides `FileIO.write` to raise
(optionally after writing part of the data) exercises the real recovery path:

    class FailingIO(FileIO):
        def write(self, path, data, fsync):
            raise OSError("disk full")

    store = SessionStore(home, io=FailingIO())   # the public, stable way to install a double

Invariant: after `append_batch` returns or raises, the file is exactly `committed` bytes (the last
size the store saw succeed) plus, on success, the whole batch: no seq is ever duplicated or skipped.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import Protocol

from loader.errors import SessionError

__all__ = ["FileIO", "StoreIO", "append_batch", "fsync_dir", "lock_exclusive", "write_all"]

logger = logging.getLogger(__name__)


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


class FileIO:
    """The real `StoreIO`. Subclass it in tests to inject failures (override `write`)."""

    def size(self, path: Path) -> int:
        return os.stat(path).st_size

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)

    def truncate(self, path: Path, size: int, fsync: bool) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.ftruncate(fd, size)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_batch(io: StoreIO, path: Path, data: bytes, fsync: bool, committed: int | None = None) -> int:
    """Append `data` as one batch; on failure truncate back and re-raise. Returns the new size.

    `committed` is the size the store last saw succeed; a larger file holds bytes of a write whose
    outcome was never observed (failed truncate, cancelled await), and is cut back before writing.
    """
    size = io.size(path)
    if committed is not None and size != committed:
        if size < committed:
            raise OSError(f"{path} shrank from {committed} to {size} bytes")
        logger.warning("%s: dropping %d unconfirmed bytes before writing", path, size - committed)
        io.truncate(path, committed, fsync)
        size = committed
    try:
        io.write(path, data, fsync)
    except BaseException:
        try:
            io.truncate(path, size, fsync)
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
        raise SessionError("SESSION_BUSY", f"session {session_id} is held by another run") from exc
