"""The per-run control server (SPEC §18.1): newline-delimited JSON-RPC 2.0 over a Unix socket.

It runs on the run's own event loop (§4) beside the agents, so a handler sees runtime state between
two loop iterations like any other task; nothing here uses threads. The socket is the only access
control: its directory is 0700, the socket is 0600 from right after `bind`, and on Linux a peer whose
`SO_PEERCRED` uid is not ours is disconnected before its first line is read.

Framing and dispatch rules (decisions where §18 leaves room):
- One JSON value per `\\n`-terminated line of at most `MAX_LINE_BYTES`; a longer line gets one
  `bad-request` (-32600, id null) and the connection is closed. Blank lines are skipped. A final
  line without `\\n` at EOF is still handled.
- Requests on one connection are handled strictly in order (the next line is handled only after
  the previous response is written); connections are independent. A connection is a raw
  non-blocking socket under `loop.add_reader` (`connection.py`), not a task: methods that need no
  await are answered inside its read callback, `subagent.prompt` in a task named
  `host:connection:N`. At close, answers still being flushed get `_CLOSE_GRACE_SECONDS`.
- Batches (JSON arrays) are not supported: one -32600 response with id null. §18.1 frames "one JSON
  object per line", and no client of ours batches.
- Parse errors and invalid requests are always answered (id null when the id is unusable), as
  JSON-RPC 2.0 requires; a valid request without `id` is a notification: it runs, nothing is sent.
- Unknown envelope members (besides jsonrpc, id, method, params) make the request invalid (-32600).
- Bounded in time and count (issue 15 item 8): a connection that sends no complete line for
  `idle_timeout` seconds (default 30) is closed (by one sweep timer walking the connections in
  activity order, not a timer per connection); above `max_connections` open connections (default
  256) the least recently active one that is idle (no request in hand, silent for over 0.5 s) is
  closed to admit the new one; with none idle, connections are admitted up to twice the cap and
  refused beyond. A client of ours sends its line right after connecting, so only idle or
  abandoned connections are ever closed.

Modules: this one owns the socket file, admission, the cap and the idle sweep; `connection.py` one
socket's framing and flow control; `frames.py` a line's decoding and its answer; `methods.py` §18.2.

Invariant: a handler failure never crosses the connection boundary as text: unexpected exceptions
are logged with `logger.exception` and answered with the fixed `internal` error (§18.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import AbortController
from dsh.loader.errors import DshError
from dsh.loader.host.connection import Answer, Connection
from dsh.loader.host.frames import OVERSIZE, answer
from dsh.loader.host.methods import Methods, RunState
from dsh.loader.host.paths import socket_path

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.tree import Tree

__all__ = ["FRESH_SECONDS", "IDLE_TIMEOUT_SECONDS", "MAX_CONNECTIONS", "ControlServer"]

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS = 256
FRESH_SECONDS = 0.5
_BACKLOG = 1024  # a burst of connects waits in the kernel rather than failing (issue 15 item 8)
_ACCEPT_BATCH = 256  # accepted per wakeup: a burst is admitted in a few loop iterations, not one each
_CLOSE_GRACE_SECONDS = 1.0  # at close, for answers already written to reach slow readers
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

_PEERCRED_SIZE = struct.calcsize("3i")

# Host wording outside §18.3; candidates for loader/texts.py (T-HOST-*).
_MSG_IN_USE = "another dsh process already serves {path}"
_MSG_UNSAFE_DIR = "{path} is not a directory owned by uid {uid}; refusing to put a control socket there"


class ControlServer:
    """Serves §18.2 for one run. `await start()` binds, `await close()` unbinds and unlinks."""

    def __init__(
        self,
        tree: Tree,
        root: Agent,
        *,
        state: Callable[[], RunState],
        environ: Mapping[str, str] | None = None,
        peer_uid: int | None = None,
        idle_timeout: float = IDLE_TIMEOUT_SECONDS,
        max_connections: int = MAX_CONNECTIONS,
        fresh_seconds: float = FRESH_SECONDS,
    ) -> None:
        """`environ` feeds `socket_path` (tests); `peer_uid` is the only uid admitted (default: ours);
        `idle_timeout`, `max_connections` and `fresh_seconds` bound the connections (module docstring)."""
        self._idle_timeout = idle_timeout
        self._max_connections = max_connections
        self._fresh_seconds = fresh_seconds
        self.path: Path = socket_path(tree.home, root.id, environ)
        self._peer_uid = os.getuid() if peer_uid is None else peer_uid
        self._check_peer = sys.platform.startswith("linux") and hasattr(socket, "SO_PEERCRED")
        self._controller = AbortController()  # aborted at close: in-flight deliveries give up
        self._methods = Methods(tree=tree, root=root, state=state, signal=self._controller.signal)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: socket.socket | None = None
        self._accept_pause: asyncio.TimerHandle | None = None
        self._closed = False
        self._inode: int | None = None
        self._connections: set[Connection] = set()  # every connection not yet closed
        # The open (not evicted) connections, least recently active first: a dict keeps insertion
        # order, and `touch` re-inserts, so admission finds the eviction candidate and the idle
        # sweep its expired connections at the front instead of scanning every connection.
        self._by_activity: dict[Connection, None] = {}
        self._tasks: dict[asyncio.Task[None], Connection] = {}  # awaiting requests in hand
        self._sweep: asyncio.TimerHandle | None = None
        self._all_lost: asyncio.Future[None] | None = None
        self._next_task = 0

    @property
    def serving(self) -> bool:
        return self._listener is not None

    async def start(self) -> Path:
        """Bind the socket and return its path. `DshError("SOCKET_IN_USE")` if a live run holds it."""
        if self._listener is not None or self._closed:
            raise RuntimeError("a ControlServer starts once; build a new one to serve again")
        _prepare_directory(self.path.parent)
        await _clear_stale(self.path)
        self._loop = asyncio.get_running_loop()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                listener.bind(os.fspath(self.path))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:  # bound by another run since `_clear_stale`
                    raise DshError("SOCKET_IN_USE", _MSG_IN_USE.format(path=self.path)) from None
                raise
            # Right after bind (§18.1), before listen: the 0700 directory keeps others out meanwhile.
            os.chmod(self.path, 0o600)
            self._inode = os.stat(self.path).st_ino
            listener.listen(_BACKLOG)
            listener.setblocking(False)
        except BaseException:
            listener.close()
            raise
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._accept)
        logger.info("control socket listening at %s", self.path)
        return self.path

    async def close(self) -> None:
        """Stop accepting, end every connection after its in-flight request, unlink the socket."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        assert self._loop is not None
        self._closed = True
        self._loop.remove_reader(listener.fileno())
        listener.close()
        for timer in (self._sweep, self._accept_pause):
            if timer is not None:
                timer.cancel()
        self._sweep = self._accept_pause = None
        # A connection waiting for a line is closed now; one handling a request sees the abort
        # (an in-flight delivery gives up), writes its answer and then ends, since `serving` is
        # False. Handlers are never cancelled: a followup runs inside the child lock, and abandoning
        # it midway would cut a materialization short.
        self._controller.abort({"kind": "disposed"})
        for connection in list(self._connections):
            if not connection.busy:
                connection.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._connections:  # answers still being flushed to slow readers
            self._all_lost = self._loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._all_lost), _CLOSE_GRACE_SECONDS)
            except TimeoutError:  # a peer that does not read must not hold the run's shutdown
                logger.debug("control connections still flushing at close; dropping them")
                for connection in list(self._connections):
                    connection.abort()
        self._unlink_own_socket()
        logger.info("control socket at %s closed", self.path)

    def _unlink_own_socket(self) -> None:
        # Only our inode: a socket that another run bound at the same path since is not ours to remove.
        try:
            if os.stat(self.path).st_ino == self._inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass
        if self.path.parent.name.startswith("dsh-"):
            # The long-path fallback directory is ours alone; leave nothing behind in /tmp once the
            # last run using it ends (another live run's socket keeps it, and rmdir then fails).
            try:
                self.path.parent.rmdir()
            except OSError:
                pass

    # -- connections (the `Host` side of connection.py) ---------------------------------------------
    def _accept(self) -> None:
        """The listener is readable: accept what is queued (a bounded batch per loop iteration),
        then serve the batch. Serving only after the batch keeps the batch what was queued: a
        client answered inside this callback reconnects at once, and accepting that too, before
        the loop has seen its old connection's EOF, would count it twice against the cap."""
        listener, loop = self._listener, self._loop
        assert listener is not None and loop is not None
        admitted: list[Connection] = []
        for _ in range(_ACCEPT_BATCH):
            try:
                sock, _address = listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    # Out of descriptors or memory: stop accepting for a second instead of spinning
                    # (asyncio's servers do the same); connections wait in the backlog meanwhile.
                    logger.debug("control socket cannot accept (%s); pausing for 1 s", exc)
                    loop.remove_reader(listener.fileno())
                    self._accept_pause = loop.call_later(1.0, self._resume_accepting)
                else:
                    logger.debug("control socket accept failed: %r", exc)
                break
            try:
                sock.setblocking(False)
                connection = Connection(self, sock, loop)
                self._connections.add(connection)
                if self._peer_allowed(sock) and self._admit(connection):
                    admitted.append(connection)
                else:
                    connection.abort()
            except Exception:  # last line of defence: close it, keep the run quiet
                logger.debug("control connection closed after an unexpected error", exc_info=True)
                sock.close()
        for connection in admitted:
            if not connection.closed:  # not evicted by a later arrival of the batch
                connection.start()

    def _resume_accepting(self) -> None:
        self._accept_pause = None
        if self._listener is not None and self._loop is not None:
            self._loop.add_reader(self._listener.fileno(), self._accept)

    def _admit(self, connection: Connection) -> bool:
        """Count a new connection in; False (close it) when the cap is reached and every other
        connection is handling a request."""
        self._by_activity[connection] = None
        if self._sweep is None:
            self._arm_sweep(connection.last_active + self._idle_timeout)
        open_count = len(self._by_activity)
        if open_count <= self._max_connections:
            return True
        # A connection silent for less than `fresh_seconds` may be a client whose line is in flight;
        # closing it would lose a request, so only longer-silent ones are idle. Without one, a new
        # connection is still admitted up to twice the cap, then refused.
        oldest = self._longest_idle(connection.last_active - self._fresh_seconds, connection)
        if oldest is None:
            if open_count <= 2 * self._max_connections:
                return True
            logger.debug("control connection refused: %d connections, none idle", open_count)
            return False
        logger.debug("control connection cap reached; closing the longest idle connection")
        # Counted out at once: a close may wait for a flush, and counting it until then would let
        # the next arrivals evict a second, third... connection for one slot.
        del self._by_activity[oldest]
        oldest.close()
        return True

    def _longest_idle(self, settled: float, new: Connection) -> Connection | None:
        """The least recently active open connection, not busy, silent since `settled`, other than
        `new`. `_by_activity` is in `last_active` order, so the walk stops at the first one active
        after `settled` and passes only busy ones (at most one per request in hand) before that."""
        for candidate in self._by_activity:
            if candidate.last_active > settled:
                return None
            if candidate is not new and not candidate.busy:
                return candidate
        return None

    def touch(self, connection: Connection) -> None:
        assert self._loop is not None
        connection.last_active = self._loop.time()
        if connection in self._by_activity:  # not when evicted meanwhile
            del self._by_activity[connection]
            self._by_activity[connection] = None

    def lost(self, connection: Connection) -> None:
        self._connections.discard(connection)
        self._by_activity.pop(connection, None)
        if not self._connections and self._all_lost is not None and not self._all_lost.done():
            self._all_lost.set_result(None)

    def spawn(self, coro: Coroutine[Any, Any, None], connection: Connection) -> None:
        assert self._loop is not None
        self._next_task += 1
        # Named per STYLE §7; tests also use the `host:` prefix to tell the handler's own calls
        # from the runtime's reactions (matrix 108).
        task = self._loop.create_task(coro, name=f"host:connection:{self._next_task}")
        self._tasks[task] = connection
        task.add_done_callback(self._tasks.pop)

    def _arm_sweep(self, when: float) -> None:
        assert self._loop is not None
        self._sweep = self._loop.call_at(when, self._close_idle)

    def _close_idle(self) -> None:
        """The idle timeout: close every connection silent for `idle_timeout`, oldest first, and
        re-arm for the next one to expire. Busy ones are skipped: their answer touches them."""
        assert self._loop is not None
        self._sweep = None
        expired = self._loop.time() - self._idle_timeout
        stale: list[Connection] = []
        next_due: float | None = None
        for connection in self._by_activity:
            if connection.last_active > expired:
                next_due = connection.last_active + self._idle_timeout
                break
            if not connection.busy:
                stale.append(connection)
        for connection in stale:
            logger.debug("control connection idle for %ss; closing it", self._idle_timeout)
            del self._by_activity[connection]
            connection.close()
        if next_due is None and self._by_activity:  # only busy ones are left
            next_due = self._loop.time() + self._idle_timeout
        if next_due is not None and self._listener is not None:
            self._arm_sweep(next_due)

    def _peer_allowed(self, sock: socket.socket) -> bool:
        if not self._check_peer:
            return True  # §18.1 SHOULD: the 0700 directory is the guard elsewhere
        pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED_SIZE))
        if uid != self._peer_uid:
            logger.warning("refused control connection from pid %d, uid %d", pid, uid)
            return False
        return True

    # -- one request ----------------------------------------------------------------------------
    def oversize(self) -> bytes:
        return OVERSIZE

    def dispatch(self, line: bytes) -> Answer:
        return answer(self._methods, line)


# -- socket file lifecycle --------------------------------------------------------------------------
def _prepare_directory(directory: Path) -> None:
    """Create the socket's directory 0700 and make sure it is ours: under /tmp another user could
    have created it first, and a socket placed in their directory would be theirs to reach."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise DshError("SOCKET_DIR_UNSAFE", _MSG_UNSAFE_DIR.format(path=directory, uid=os.getuid()))
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(directory, 0o700)


async def _clear_stale(path: Path) -> None:
    """§18.1: a path that refuses connections is a leftover of a dead run (unlink it); one that
    accepts belongs to a live run, and binding over it would steal that run's address."""
    if not os.path.lexists(path):
        return
    try:
        _reader, writer = await asyncio.open_unix_connection(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        logger.info("removed stale control socket %s", path)
        return
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    raise DshError("SOCKET_IN_USE", _MSG_IN_USE.format(path=path))
