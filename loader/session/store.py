"""The JSONL session store (SPEC §5.1, §5.4, §5.6).

Layout: `home/sessions/<id>/session.jsonl`, directories 0700, files 0600. A live session's file is
held with an exclusive `fcntl.flock` on a descriptor kept open until `close`.

Write path (§5.4): `Session.append` calls the store's sink, which serializes the event and queues the
line synchronously. A timer of `batch_delay_ms` (0 = next loop iteration) starts when an idle queue
receives work; when it fires, one writer task appends the whole queue as one batch in one
`asyncio.to_thread` call, through the descriptor the flock is held on (`FileIO.attach`). With
`fsync`, the batch is then made durable by the store's `SyncGroup` (issue 13 group commit: the syncs
requested in one loop iteration, by any session's batch or creation, share one `syncfs`/fsync).
`flush` is the durability barrier (§5.5): it cancels the timer, waits for an in-flight write and
drains the queue; concurrent flushes share one barrier task; it returns only after the sync.

Invariants, per live session:
- At most one write is in flight (`_Live.writer`); the barrier and the timer only ever start a write
  when `writer is None`. Blocking I/O never runs concurrently for one file (§4).
- A batch leaves the queue only after its write succeeded, and `committed` is then the file size.
  A failed write truncates the file back to `committed` and keeps the batch at the queue head, so
  the file never holds a duplicated or skipped seq. Because a thread cannot be cancelled, a write
  whose awaiting task was cancelled may still land; the next write sees `size > committed` and
  truncates first, which keeps the same invariant.

Creation (§5.4 item 1): rule "a session file appears complete or not at all". The header goes to
a temp file, is synced, and is published with a hard link (EEXIST keeps `SESSION_EXISTS`); the
flock is taken on the temp file, so it is held on the final file before the session is published
(`_fileio.create_session_file`). A directory a kill left behind reads as `SESSION_UNMATERIALIZED`.

Load (§5.6): rule "claim and entry are one durable fact" (the file work is `_loadfile`). A live
pre-step checkpoint failure still consumes its claim: that turn's `turn/end` makes it a closed turn.

Replay runs (`inline_io=True`, SPEC §26 item 1): under a transcript nothing external happens, so
the order of all agents must be a function of the transcript alone. A worker thread would make
*when* the loop resumes an awaiting task depend on the OS scheduler, so there the same blocking
calls run inline on the loop thread, and the write-behind timer is always next-loop-iteration
(`call_soon`, FIFO like every other ready callback) whatever `batch_delay_ms` says. There a write
needs no task either (issue 13): the timer's callback or the flush itself writes the queue at once
(`_write_inline`); with `fsync` the batch is committed only when the group sync covering it returns,
and until then `writer` is a future that sync's callback completes, so "one write in flight", the
truncate-on-failure rule and "a flush that returns means fsynced" hold as with the writer task. A
flush with fsync off and nothing in flight therefore returns without suspending: what a checkpoint
costs in loop iterations is not part of the replay contract (transcripts/README.md).

I/O seam: every append and truncation goes through a `StoreIO` (`size`, `write`, `truncate`;
defined with `FileIO` and `append_batch` in `_fileio.py`, re-exported here). `SessionStore(io=...)`
is the public, stable way to install a failing double; see `_fileio` for the contract.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsh.loader.errors import CheckpointError, SessionError
from dsh.loader.ids import is_valid_session_id
from dsh.loader.session._syncgroup import SyncGroup
from dsh.loader.session._fileio import FileIO, StoreIO, append_batch, append_held, create_session_file
from dsh.loader.session._loadfile import load_session_file, locking_call
from dsh.loader.session.envelope import FORMAT_VERSION, Event, encode_line, header_problem
from dsh.loader.session.repair import ReadResult, read
from dsh.loader.session.session import Session
from dsh.loader.texts import render

__all__ = ["FileIO", "SessionStore", "StoreIO", "append_batch"]

logger = logging.getLogger(__name__)

_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})

class _Live:
    """Per-session store state; touched only on the loop thread."""

    session: Session

    def __init__(self, path: Path, lock_fd: int, committed: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self.committed = committed  # file size after the last confirmed write
        self.queue: list[bytes] = []  # encoded lines, oldest first; the head batch may be a failed one
        self.timer: asyncio.Handle | None = None
        # The write in flight: a task (thread I/O), or under inline I/O a future the group sync's
        # callback completes; its result is the write's failure, or None.
        self.writer: asyncio.Future[BaseException | None] | None = None
        self.barrier: asyncio.Task[None] | None = None
        self.closing: asyncio.Task[None] | None = None
        self.error: BaseException | None = None  # the last write failure, cleared by a success


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Shared tasks are awaited through shield(); mark the exception retrieved even if nobody stayed.
    if not task.cancelled():
        task.exception()


class SessionStore:
    """The JSONL mirror of live sessions (§5.4–§5.6); the only writer of `sessions/<id>/`.

    Fields and the invariants they keep:
    - `_live[id]` exists exactly while the session is open in this process: from `create`/`load`
      (which take the exclusive flock) until `close` releases the lock and deletes the entry. A
      second `create`/`load` of a live id is SESSION_EXISTS / SESSION_BUSY.
    - per `_Live`: at most one write in flight (`writer`); `queue` holds encoded lines not yet
      confirmed, oldest first; `committed` is the file size after the last confirmed write, so the
      file never holds a duplicated or skipped seq (a failed or orphaned write is truncated back to
      `committed` before the next one).
    - `barrier` is the one shared `flush` task per session; `closing` the one shared close.
    - `io` is the only path to the disk for appends and truncations (the failure-injection seam);
      `fsync` decides whether batches and new directories are fsynced.
    """

    def __init__(
        self,
        home: Path,
        *,
        batch_delay_ms: int = 200,
        fsync: bool = True,
        io: StoreIO | None = None,
        clock: Callable[[], int] | None = None,
        inline_io: bool = False,
    ) -> None:
        self.home = Path(home)
        self.sessions_dir = self.home / "sessions"
        self._sessions_str = str(self.sessions_dir)
        self.batch_delay_ms = batch_delay_ms
        self.fsync = fsync
        self.io: StoreIO = io if io is not None else FileIO()
        self._clock = clock
        # SPEC §26 item 1: replay runs do their blocking I/O on the loop thread (module docstring).
        self.inline_io = inline_io
        self._live: dict[str, _Live] = {}
        # Issue 13: one sync per loop iteration for every batch and creation that asked for one.
        self._sync = SyncGroup(self.io.sync, inline=inline_io)

    def __repr__(self) -> str:
        return f"SessionStore({str(self.home)!r}, live={len(self._live)})"

    # -- lookup --------------------------------------------------------------------------------

    def path(self, session_id: str) -> Path:
        return self.sessions_dir / session_id / "session.jsonl"

    def exists(self, session_id: str) -> bool:
        """True when the id's directory exists (materialized, or a creation began): its file can
        exist only inside it, so one `stat` of the directory answers what `path.exists() or
        path.parent.exists()` did with two and three `Path` objects (issue 13: once per child)."""
        if not is_valid_session_id(session_id):
            return False
        try:
            os.stat(os.path.join(self._sessions_str, session_id))
        except OSError as exc:
            if exc.errno in _ABSENT:  # what `Path.exists` reads as "no"; other errors propagate
                return False
            raise
        return True

    def is_live(self, session_id: str) -> bool:
        return session_id in self._live

    def get_live(self, session_id: str) -> Session | None:
        live = self._live.get(session_id)
        return live.session if live is not None else None

    def read(self, session_id: str) -> ReadResult:
        """Read-only view (§5.6); blocking, so async callers wrap it in `asyncio.to_thread`."""
        if not is_valid_session_id(session_id):
            raise SessionError("SESSION_NOT_FOUND", render("R-SESSION-NOT-AN-ID", id=session_id))
        return read(self.path(session_id))

    # -- create --------------------------------------------------------------------------------

    async def create(self, header: dict[str, Any]) -> Session:
        """Materialize the file eagerly and atomically (§5.4 item 1, `create_session_file`): the file
        appears complete or not at all, and the session is returned only once it is locked."""
        session_id = header.get("id")
        if not isinstance(session_id, str) or not is_valid_session_id(session_id):
            raise SessionError("INVALID_SESSION_ID", render("R-SESSION-NOT-AN-ID", id=session_id))
        problem = header_problem(header)
        if problem is None and header["version"] != FORMAT_VERSION:
            problem = render("R-SESSION-HEADER-VERSION", version=header["version"], expected=FORMAT_VERSION)
        if problem is not None:
            raise SessionError("INVALID_HEADER", problem)
        if session_id in self._live:
            raise SessionError("SESSION_EXISTS", render("R-SESSION-EXISTS", id=session_id))
        header = json.loads(json.dumps(header, allow_nan=False))
        line = encode_line(header)
        path = self.path(session_id)
        fd = await create_session_file(
            self.io, path, line, self.fsync, session_id, self._sync, inline=self.inline_io
        )
        return self._publish(header, [], path, fd, len(line))

    def _publish(
        self, header: dict[str, Any], events: list[Event], path: Path, fd: int, size: int
    ) -> Session:
        live = _Live(path, fd, size)
        sink = functools.partial(self._enqueue, live)  # no closure frame per event (issue 13)
        live.session = Session(header, events, line_sink=sink, clock=self._clock)
        self._live[live.session.id] = live
        self.io.attach(path, fd)  # batches go through the locked descriptor (issue 13)
        return live.session

    # -- write-behind --------------------------------------------------------------------------

    def _enqueue(self, live: _Live, event: Event, line: bytes) -> None:
        """The Session's line sink: synchronous; raising here keeps the event out of the log."""
        live.queue.append(line)
        # An idle queue starts the timer; a failed batch at the head is retried by the same timer.
        if live.timer is None and live.writer is None and live.barrier is None:
            self._arm_timer(live)

    def _arm_timer(self, live: _Live) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the queue waits for the next flush
        if self.batch_delay_ms <= 0 or self.inline_io:  # replay: no clock decides the order (§26 item 1)
            live.timer = loop.call_soon(self._on_timer, live)
        else:
            live.timer = loop.call_later(self.batch_delay_ms / 1000, self._on_timer, live)

    def _on_timer(self, live: _Live) -> None:
        live.timer = None
        if live.writer is None and live.barrier is None and live.queue:
            if self.inline_io:
                self._write_inline(live, rearm=True)  # a failure is remembered and retried
            else:
                self._start_write(live)

    def _write_inline(self, live: _Live, *, rearm: bool) -> BaseException | None:
        """Write the whole queue now, on the loop thread, with no task (replay runs, SPEC §26 item 1).

        Without fsync the batch is committed before this returns. With fsync the batch is written
        now but committed only when the group sync that covers it returns: until then `live.writer`
        is a future completed by that sync's callback, so one write is in flight, as with a task.
        Returns the write's failure (remembered in `live.error`); a sync failure is the writer's result.
        """
        assert live.writer is None, "one write per session at a time"
        count = len(live.queue)
        data = b"".join(live.queue)
        try:
            if self.io.__class__ is FileIO:  # the real I/O: one frame through the held descriptor
                size = append_held(live.lock_fd, live.path, data, self.fsync, live.committed)
            else:  # a double: through its methods
                size = append_batch(self.io, live.path, data, self.fsync, live.committed, defer_sync=True)
        except Exception as exc:
            live.error = exc
            logger.warning("session %s: write of %d events failed: %s", live.session.id, count, exc)
            return exc
        if not self.fsync:
            self._commit(live, count, size, rearm=rearm)
            return None
        writer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        writer.add_done_callback(_retrieve)
        live.writer = writer
        group = self._sync.request(fds=[live.lock_fd])
        group.add_done_callback(functools.partial(self._on_synced, live, writer, count, size, size - len(data)))
        return None

    def _on_synced(
        self, live: _Live, writer: asyncio.Future[BaseException | None], count: int, size: int, before: int,
        group: asyncio.Future[None],
    ) -> None:
        """The group sync covering an inline batch returned: commit it, or cut it back (the
        truncate-on-failure rule: `committed` only ever names fsynced bytes)."""
        live.writer = None
        error = None if group.cancelled() else group.exception()
        if group.cancelled() or error is not None:
            try:
                self.io.truncate(live.path, before, self.fsync)
            except Exception:
                logger.exception("%s: truncate back to %d bytes failed", live.path, before)
            if group.cancelled():  # the loop is going away: nobody may be told the data is durable
                writer.cancel()
                return
            live.error = error
            logger.warning("session %s: sync of %d events failed: %s", live.session.id, count, error)
            writer.set_result(error)
            return
        writer.set_result(None)
        self._commit(live, count, size, rearm=True)

    def _commit(self, live: _Live, count: int, size: int, *, rearm: bool) -> None:
        # The batch leaves the queue in the same step that records the new size.
        live.error = None
        live.committed = size
        del live.queue[:count]
        if rearm and live.queue and live.barrier is None and live.timer is None:
            self._arm_timer(live)  # events that arrived during the write

    def _start_write(self, live: _Live) -> asyncio.Task[BaseException | None]:
        assert live.writer is None, "one write per session at a time"
        count = len(live.queue)
        data = b"".join(live.queue)
        live.writer = asyncio.get_running_loop().create_task(
            self._write(live, count, data), name=f"session-write:{live.session.id}"
        )
        live.writer.add_done_callback(_retrieve)
        return live.writer

    async def _write(self, live: _Live, count: int, data: bytes) -> BaseException | None:
        """Write the head `count` lines; return the failure instead of raising it (it is remembered)."""
        try:
            size = await asyncio.to_thread(  # thread I/O only: inline writes go through `_write_inline`
                functools.partial(append_batch, defer_sync=True), self.io, live.path, data, self.fsync, live.committed
            )
            if self.fsync:
                await self._synced(live, size - len(data))
        except Exception as exc:
            live.writer = None
            live.error = exc
            logger.warning("session %s: write of %d events failed: %s", live.session.id, count, exc)
            return exc
        except BaseException:
            live.writer = None
            raise
        # Sync from here: the batch leaves the queue in the same step that records the new size.
        live.writer = None
        live.error = None
        live.committed = size
        del live.queue[:count]
        if live.queue and live.barrier is None and live.timer is None:
            self._arm_timer(live)  # events that arrived during the write
        return None

    async def _synced(self, live: _Live, before: int) -> None:
        """Group-commit the batch just written (`_syncgroup`); on failure cut it back and raise, so
        `committed` only ever names fsynced bytes (the truncate-on-failure rule of `append_batch`)."""
        try:
            await self._sync.sync(fds=[live.lock_fd])
        except BaseException:
            try:
                self.io.truncate(live.path, before, self.fsync)
            except Exception:
                logger.exception("%s: truncate back to %d bytes failed", live.path, before)
            raise

    async def flush(self, session: Session) -> None:
        """Durability barrier (§5.4 item 3). Raises `CheckpointError`; the batch then stays queued."""
        live = self._live.get(session.id)
        if live is None or live.session is not session:
            return
        if self.inline_io:
            await self._flush_inline(live)
            return
        if live.barrier is None:
            if not live.queue and live.writer is None:
                return
            live.barrier = asyncio.get_running_loop().create_task(
                self._drain(live), name=f"session-flush:{session.id}"
            )
            live.barrier.add_done_callback(_retrieve)
        await asyncio.shield(live.barrier)

    async def _flush_inline(self, live: _Live) -> None:
        """The barrier without a task (replay runs): with nothing in flight and fsync off it returns
        without suspending; with fsync it waits for the group sync covering its batch, so a
        checkpoint is still durable before the step proceeds. A write in flight is waited for and
        a failure there retried, as `_drain` does."""
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        while True:
            if live.writer is not None:
                await asyncio.shield(live.writer)
                continue
            if not live.queue:
                return
            error = self._write_inline(live, rearm=False)
            if error is None and live.writer is not None:
                error = await asyncio.shield(live.writer)
            if error is not None:
                message = render("R-SESSION-CHECKPOINT", id=live.session.id, error=error)
                raise CheckpointError(message) from error

    async def _drain(self, live: _Live) -> None:
        try:
            if live.timer is not None:
                live.timer.cancel()
                live.timer = None
            while True:
                if live.writer is not None:
                    await asyncio.shield(live.writer)  # a failure there is retried by the next pass
                    continue
                if not live.queue:
                    return
                error = await asyncio.shield(self._start_write(live))
                if error is not None:
                    message = render("R-SESSION-CHECKPOINT", id=live.session.id, error=error)
                    raise CheckpointError(message) from error
        finally:
            live.barrier = None

    # -- close ---------------------------------------------------------------------------------

    async def close(self, session: Session) -> None:
        """Final flush (failure logged), unlock, forget. Idempotent."""
        await asyncio.shield(self.closing(session))

    def closing(self, session: Session) -> asyncio.Future[None]:
        """`close` as a future (started now, memoized), for a caller that chains it without a task
        of its own (`Agent.dispose`, issue 13); a cancelled awaiter must not cancel it."""
        live = self._live.get(session.id)
        if live is None or live.session is not session:
            session.closed = True
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        if live.closing is None:
            live.closing = asyncio.get_running_loop().create_task(
                self._close(live), name=f"session-close:{session.id}"
            )
            live.closing.add_done_callback(_retrieve)
        return live.closing

    async def _close(self, live: _Live) -> None:
        session = live.session
        session.closed = True  # nothing can be queued behind the final flush
        try:
            await self.flush(session)
        except Exception as exc:
            logger.error(
                "session %s: final flush failed, %d events not written: %s",
                session.id, len(live.queue), exc,
            )
        if live.timer is not None:
            live.timer.cancel()
            live.timer = None
        self.io.detach(live.path)
        try:
            fcntl.flock(live.lock_fd, fcntl.LOCK_UN)
        finally:
            os.close(live.lock_fd)
            del self._live[session.id]

    # -- load ----------------------------------------------------------------------------------

    async def load(self, session_id: str) -> Session:
        """Cold resume (§5.6): read, check, lock, repair the tail, return a live session."""
        if session_id in self._live:
            raise SessionError("SESSION_BUSY", render("R-SESSION-BUSY-HERE", id=session_id))
        if not is_valid_session_id(session_id):
            raise SessionError("SESSION_NOT_FOUND", render("R-SESSION-NOT-AN-ID", id=session_id))
        path = self.path(session_id)
        result, closers, fd, size = await locking_call(
            lambda r: r[2], load_session_file, self.io, self.fsync, (self.home, self.sessions_dir), session_id, path,
            inline=self.inline_io,
        )
        if session_id in self._live:  # a concurrent create/load in this store won the race
            os.close(fd)
            raise SessionError("SESSION_BUSY", render("R-SESSION-BUSY-HERE", id=session_id))
        return self._publish(result.header, result.events + closers, path, fd, size)
