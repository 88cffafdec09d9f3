"""The blocking half of `SessionStore.load` (SPEC §5.6): read, check, lock and repair a session
file, and the thread hop that keeps a cancelled load from leaking its locked descriptor.

Rule "claim and entry are one durable fact": the closers of a crash-open turn re-queue every message
a claim in that turn removed and no `user/message` entered (`repair.interrupted_turn_closers`); like
every closer they are appended, never rewritten. Every line is validated before any write, and the
directories are checked (issue 15 item 1) before the first one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dsh.loader.errors import CheckpointError
from dsh.loader.session._fileio import StoreIO, append_batch, blocking_call, check_dirs, lock_exclusive, open_regular
from dsh.loader.session.envelope import Event, encode_line
from dsh.loader.session.repair import ReadResult, check_resumable, parse, read_raw
from dsh.loader.texts import render

__all__ = ["load_session_file", "locking_call"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


async def locking_call(
    fd_of: Callable[[_T], int], fn: Callable[..., _T], *args: Any, inline: bool = False
) -> _T:
    """Run `fn` in a thread; if our caller is cancelled meanwhile, close the lock fd it opens.

    A thread cannot be cancelled: without this, a cancelled `create`/`load` would leave the file
    locked by a descriptor nobody owns until the process exits. With `inline` (replay runs, SPEC
    §26 item 1) `fn` runs on the loop thread: there is no await, so nothing to cancel.
    """
    return await blocking_call(inline, fn, *args, orphan=lambda result: os.close(fd_of(result)))


def load_session_file(
    io: StoreIO, fsync: bool, dirs: tuple[Path, Path], session_id: str, path: Path
) -> tuple[ReadResult, list[Event], int, int]:
    """(read result, closers appended, locked fd, file size): blocking, one call per load.
    `dirs` is (home, sessions directory), checked with the session's own directory."""
    raw = read_raw(path)
    result = parse(raw, source=str(path))
    closers = check_resumable(session_id, result)  # every line validated before any write
    check_dirs(*dirs, path.parent)  # issue 15 item 1: before any write
    fd = open_regular(path, os.O_RDWR | os.O_APPEND)  # held for the session's batches (`FileIO.attach`)
    try:
        lock_exclusive(fd, session_id)
        if os.fstat(fd).st_size != len(raw):
            # The previous holder wrote between our read and our lock: decide on what is there now.
            raw = read_raw(path)
            result = parse(raw, source=str(path))
            closers = check_resumable(session_id, result)
        size = len(raw)
        try:
            if result.issue is not None:
                size = result.issue["truncateTo"]
                logger.warning("session %s: truncating torn tail at byte %d", session_id, size)
                io.truncate(path, size, fsync)
            if closers:
                logger.warning("session %s: closing interrupted turn with %d events", session_id, len(closers))
                data = b"".join(encode_line(event) for event in closers)
                size = append_batch(io, path, data, fsync, size)
        except OSError as exc:
            raise CheckpointError(render("R-SESSION-REPAIR", id=session_id, error=exc)) from exc
    except BaseException:
        os.close(fd)
        raise
    return result, closers, fd, size
