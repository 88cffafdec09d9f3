"""The write-behind path of the JSONL store (SPEC §5.4 items 2–3, §5.5 barriers): `WriteBehind`,
the half of `SessionStore` that queues, writes and flushes a live session's lines.

Write path (§5.4): `Session.append` calls the store's sink, which serializes the event and queues the
line synchronously. A timer of `batch_delay_ms` (0 = next loop iteration) starts when an idle queue
receives work; when it fires, one writer task appends the whole queue as one batch in one
`asyncio.to_thread` call, through the descriptor the flock is held on (`FileIO.attach`). With
`fsync`, the batch is then made durable by the store's `SyncGroup` (issue 13 group commit: the syncs
requested in one loop iteration, by any session's batch or creation, share one `syncfs`/fsync).
`flush` is the durability barrier (§5.5): it cancels the timer (inline I/O leaves it armed, see
`_flush_inline`), waits for an in-flight write and drains the queue; concurrent flushes share one
barrier task; it returns only after the sync.

Invariants, per live session:
- At most one write is in flight (`_Live.writer`); the barrier and the timer only ever start a write
  when `writer is None`. Blocking I/O never runs concurrently for one file (§4).
- A batch leaves the queue only after its write succeeded, and `committed` is then the file size.
  A failed write truncates the file back to `committed` and keeps the batch at the queue head, so
  the file never holds a duplicated or skipped seq. Because a thread cannot be cancelled, a write
  whose awaiting task was cancelled may still land; the next write sees `size > committed` and
  truncates first, which keeps the same invariant.

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
"""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from typing import Any

from dsh.loader.errors import CheckpointError
from dsh.loader.session._fileio import FileIO, StoreIO, append_batch, append_held
from dsh.loader.session._syncgroup import SyncGroup
from dsh.loader.session.envelope import Event
from dsh.loader.session.session import Session
from dsh.loader.texts import render

__all__ = ["WriteBehind"]

logger = logging.getLogger("dsh.loader.session.store")  # the store's log, as before the split


class _Tick:
    """`_Live.timer` of a session waiting for the store's next-iteration tick (`_arm_timer`):
    one handle per loop iteration for every dirty session, not one per session (issue 13)."""

    __slots__ = ()

    def cancel(self) -> None:
        """Nothing to cancel: whoever sets `timer` to None takes the session off the tick."""


_TICK = _Tick()


class _Live:
    """Per-session store state; touched only on the loop thread."""

    session: Session

    def __init__(self, path: Path, lock_fd: int, committed: int) -> None:
        self.path = path
        self.lock_fd = lock_fd
        self.committed = committed  # file size after the last confirmed write
        self.queue: list[bytes] = []  # encoded lines, oldest first; the head batch may be a failed one
        self.timer: asyncio.Handle | _Tick | None = None
        # The write in flight: a task (thread I/O), or under inline I/O a future the group sync's
        # callback completes; its result is the write's failure, or None.
        self.writer: asyncio.Future[BaseException | None] | None = None
        self.barrier: asyncio.Task[None] | None = None
        self.closing: asyncio.Task[None] | None = None
        self.error: BaseException | None = None  # the last write failure, cleared by a success
        # Inline I/O with fsync: the head `unsynced` lines of `queue` are written (the file is
        # `written` bytes) and wait for `group`, the sync that will cover them (`_write_inline`).
        self.unsynced = 0
        self.written = committed
        self.group: asyncio.Future[None] | None = None
        # Lines ever queued, and ever committed: a barrier waits for the lines queued before it
        # (`_flush_inline`), not for what others append while it waits.
        self.enqueued = 0
        self.done = 0


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Shared tasks are awaited through shield(); mark the exception retrieved even if nobody stayed.
    if not task.cancelled():
        task.exception()


class WriteBehind:
    """Queue, timer, writes and barrier of every live session (`_live`); `SessionStore` adds
    lookup, creation, close and load. The fields are `SessionStore`'s (set in its `__init__`)."""

    io: StoreIO
    fsync: bool
    batch_delay_ms: int
    inline_io: bool
    _sync: SyncGroup
    _live: dict[str, _Live]
    # Sessions armed for the next loop iteration (`timer is _TICK`), in the order they were armed,
    # and the one `call_soon` handle that writes them (`_on_tick`); set in `SessionStore.__init__`.
    _dirty: list[_Live]
    _tick: asyncio.Handle | None

    def _enqueue(self, live: _Live, event: Event, line: bytes) -> None:
        """The Session's line sink: synchronous; raising here keeps the event out of the log."""
        live.queue.append(line)
        live.enqueued += 1
        # An idle queue starts the timer; a failed batch at the head is retried by the same timer.
        if live.timer is None and live.writer is None and live.barrier is None:
            self._arm_timer(live)

    def _arm_timer(self, live: _Live) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the queue waits for the next flush
        if self.batch_delay_ms <= 0 or self.inline_io:  # replay: no clock decides the order (§26 item 1)
            # Next loop iteration, all dirty sessions in one callback, in the order they were armed:
            # FIFO like a handle each, so the order stays a function of the ready queue alone.
            live.timer = _TICK
            self._dirty.append(live)
            if self._tick is None:
                self._tick = loop.call_soon(self._on_tick)
        else:
            live.timer = loop.call_later(self.batch_delay_ms / 1000, self._on_timer, live)

    def _on_tick(self) -> None:
        """The next-iteration timer of every session armed since the last tick. A session armed
        while this runs (a write's events, a failed batch's retry) waits for the next tick."""
        self._tick = None
        dirty, self._dirty = self._dirty, []
        for live in dirty:
            if live.timer is _TICK:  # else cancelled (`timer = None`) since it was armed
                self._on_timer(live)

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
        A barrier that finds a batch of its session waiting for a group that has not run yet
        extends it (`_extendable`): the rest of the queue is written behind it and waits for the
        same sync (issue 13: a checkpoint right after a write-behind batch cost two syncs in a row).
        The sync covers every byte written before it, so both batches are durable when it
        returns; on failure both are cut back and stay queued.
        Returns the write's failure (remembered in `live.error`); a sync failure is the writer's result.
        """
        start = live.unsynced
        assert live.writer is None or start > 0, "one write per session at a time"
        count = len(live.queue) - start
        data = b"".join(live.queue[start:] if start else live.queue)
        expected = live.written if start else live.committed  # the file as this write finds it
        try:
            if self.io.__class__ is FileIO:  # the real I/O: one frame through the held descriptor
                size = append_held(live.lock_fd, live.path, data, self.fsync, expected)
            else:  # a double: through its methods
                size = append_batch(self.io, live.path, data, self.fsync, expected, defer_sync=True)
        except Exception as exc:
            live.error = exc
            logger.warning("session %s: write of %d events failed: %s", live.session.id, count, exc)
            return exc
        if not self.fsync:  # `_commit`, inline (issue 13: three batches per model call)
            live.error = None
            live.committed = size
            del live.queue[:count]
            live.done += count
            if rearm and live.queue and live.barrier is None and live.timer is None:
                self._arm_timer(live)  # events that arrived during the write
            return None
        live.unsynced = start + count
        live.written = size
        if start:  # an extension: the group this session's batch waits for covers it too
            return None
        writer: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        writer.add_done_callback(_retrieve)
        live.writer = writer
        group = self._sync.request(fds=[live.lock_fd])
        live.group = group
        group.add_done_callback(functools.partial(self._on_synced, live, writer, live.committed))
        return None

    def _extendable(self, live: _Live) -> bool:
        """A barrier may write behind the batch in flight (`_write_inline`): inline fsync I/O, lines
        queued after it, and its group not run yet (a group that ran has scheduled its callbacks,
        which commit the batch; bytes written now would not be covered)."""
        group = live.group
        return (self.fsync and live.writer is not None and len(live.queue) > live.unsynced
                and group is not None and not group.done())

    def _on_synced(
        self, live: _Live, writer: asyncio.Future[BaseException | None], before: int, group: asyncio.Future[None],
    ) -> None:
        """The group sync covering an inline batch returned: commit it, or cut it back (the
        truncate-on-failure rule: `committed` only ever names fsynced bytes)."""
        count, size = live.unsynced, live.written
        live.writer = None
        live.group = None
        live.unsynced = 0
        error = None if group.cancelled() else group.exception()
        if group.cancelled() or error is not None:
            try:
                self.io.truncate(live.path, before, self.fsync)
            except Exception:
                logger.exception("%s: truncate back to %d bytes failed", live.path, before)
            live.written = before
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
        live.done += count
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
        live.done += count
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
            if not self.fsync:  # a plain write, no coroutine of its own (issue 13: 3 per model call)
                if live.queue and (error := self._write_inline(live, rearm=False)) is not None:
                    message = render("R-SESSION-CHECKPOINT", id=live.session.id, error=error)
                    raise CheckpointError(message) from error
                return
            if live.queue or live.writer is not None:  # else nothing to do
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
        a failure there retried, as `_drain` does.

        An armed timer stays armed (issue 13: cancelling it cost a handle per model call, since the
        events after the model-request checkpoint armed a new one at once): it fires in the next
        loop iteration, when it writes what was queued after this barrier, or nothing. The write
        cannot overlap the barrier's: here the writes are inline, and a timer that fires while a
        group sync is awaited finds the writer in flight and leaves the queue to the barrier."""
        target = live.enqueued  # the barrier is for what was appended before it (§5.5)
        while live.done < target:
            if live.writer is not None:
                if self._extendable(live):
                    error = self._write_inline(live, rearm=False)  # behind the batch, in its group
                    if error is not None:
                        message = render("R-SESSION-CHECKPOINT", id=live.session.id, error=error)
                        raise CheckpointError(message) from error
                await asyncio.shield(live.writer)
                continue
            if not live.queue:  # (cannot happen: a line leaves the queue only as it is counted done)
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
