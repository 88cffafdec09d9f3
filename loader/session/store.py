"""The JSONL session store (SPEC §5.1, §5.4, §5.6).

Layout: `home/sessions/<id>/session.jsonl`, directories 0700, files 0600. A live session's file is
held with an exclusive `fcntl.flock` on a descriptor kept open until `close`.

Write path (§5.4): the write-behind queue, the timer, the writes and the barrier (`flush`) are
`_writebehind.WriteBehind`, which this store extends; its docstring states the invariants.

Creation (§5.4 item 1): rule "a session file appears complete or not at all". The header goes to
a temp file, is synced, and is published with a hard link (EEXIST keeps `SESSION_EXISTS`); the
flock is taken on the temp file, so it is held on the final file before the session is published
(`_create.create_session_file`). A directory a kill left behind reads as `SESSION_UNMATERIALIZED`.

Load (§5.6): rule "claim and entry are one durable fact" (the file work is `_loadfile`). A live
pre-step checkpoint failure still consumes its claim: that turn's `turn/end` makes it a closed turn.

Replay runs (`inline_io=True`, SPEC §26 item 1): the same blocking calls run inline on the loop
thread (`_writebehind`, `_create`, `_loadfile`).

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

from dsh.loader.errors import SessionError
from dsh.loader.ids import is_valid_session_id
from dsh.loader.session._create import create_session_file
from dsh.loader.session._fileio import FileIO, StoreIO, append_batch
from dsh.loader.session._loadfile import load_session_file, locking_call
from dsh.loader.session._syncgroup import SyncGroup
from dsh.loader.session._writebehind import WriteBehind, _Live, _retrieve
from dsh.loader.session.envelope import FORMAT_VERSION, Event, encode_line, header_problem
from dsh.loader.session.repair import ReadResult, read
from dsh.loader.session.session import Session
from dsh.loader.texts import render

__all__ = ["FileIO", "SessionStore", "StoreIO", "append_batch"]

logger = logging.getLogger(__name__)

_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP})


class SessionStore(WriteBehind):
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
        self._dirty: list[_Live] = []
        self._tick: asyncio.Handle | None = None
        # Home and `sessions/` passed issue 15's check in a creation of this store: a private
        # directory's entries change only by its owner, so later creations check only their own.
        self._parents_checked = False
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
        line = encode_line(header)
        header = json.loads(line)  # the log's copy is what a reload gives (one encoding, issue 13)
        path = self.path(session_id)
        fd = await create_session_file(
            self.io, path, line, self.fsync, session_id, self._sync, inline=self.inline_io,
            parents_checked=self._parents_checked,
        )
        self._parents_checked = True
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
            loop = asyncio.get_running_loop()
            if self.inline_io and not live.queue and live.writer is None and live.barrier is None:
                # Nothing to write, and inline I/O: the final flush would not suspend, so close
                # now, without a task (issue 13: one per child at a fan-out's end).
                session.closed = True
                self._release(live)
                done = loop.create_future()
                done.set_result(None)
                return done
            live.closing = loop.create_task(self._close(live), name=f"session-close:{session.id}")
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
        self._release(live)

    def _release(self, live: _Live) -> None:
        """Unlock and forget a closed session whose queue is written (or given up on)."""
        session = live.session
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
