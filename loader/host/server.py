"""The per-run control server (SPEC §18.1): newline-delimited JSON-RPC 2.0 over a Unix socket.

It runs on the run's own event loop (§4) beside the agents, so a handler sees runtime state between
two loop iterations like any other task; nothing here uses threads. The socket is the only access
control: its directory is 0700, the socket is 0600 from right after `bind`, and on Linux a peer whose
`SO_PEERCRED` uid is not ours is disconnected before its first line is read.

Framing and dispatch rules (decisions where §18 leaves room):
- One JSON value per `\\n`-terminated line of at most `MAX_LINE_BYTES`; a longer line gets one
  `bad-request` (-32600, id null) and the connection is closed. Blank lines are skipped. A final
  line without `\\n` at EOF is still handled.
- Requests on one connection are handled strictly in order (the next line is read only after the
  previous response is written); connections are independent tasks.
- Batches (JSON arrays) are not supported: one -32600 response with id null. §18.1 frames "one JSON
  object per line", and no client of ours batches.
- Parse errors and invalid requests are always answered (id null when the id is unusable), as
  JSON-RPC 2.0 requires; a valid request without `id` is a notification: it runs, nothing is sent.
- Unknown envelope members (besides jsonrpc, id, method, params) make the request invalid (-32600).
- Bounded in time and count (issue 15 item 8): a connection that sends no complete line for
  `idle_timeout` seconds (default 30) is closed; above `max_connections` open connections (default
  256) the least recently active one that is idle (no request in hand, silent for over 0.5 s) is
  closed to admit the new one; with none idle, connections are admitted up to twice the cap and
  refused beyond. A client of ours sends its line right after connecting, so only idle or
  abandoned connections are ever closed.

Invariant: a handler failure never crosses the connection boundary as text: unexpected exceptions
are logged here with `logger.exception` and answered with the fixed `internal` error (§18.3).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import stat
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import AbortController
from dsh.loader.boundedjson import JsonProblem, loads_bounded
from dsh.loader.errors import DshError
from dsh.loader.host.methods import Methods, RunState
from dsh.loader.host.paths import socket_path
from dsh.loader.host.protocol import (
    INVALID_REQUEST,
    JSONRPC_VERSION,
    MAX_LINE_BYTES,
    PARSE_ERROR,
    RpcError,
    bad_request,
    internal,
)

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.tree import Tree

__all__ = ["FRESH_SECONDS", "IDLE_TIMEOUT_SECONDS", "MAX_CONNECTIONS", "ControlServer"]

logger = logging.getLogger(__name__)

IDLE_TIMEOUT_SECONDS = 30.0
MAX_CONNECTIONS = 256
FRESH_SECONDS = 0.5
_BACKLOG = 1024  # a burst of connects waits in the kernel rather than failing (issue 15 item 8)

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_NO_ID = object()

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
        self._controller = AbortController()  # aborted at close: in-flight deliveries give up
        self._methods = Methods(tree=tree, root=root, state=state, signal=self._controller.signal)
        self._server: asyncio.AbstractServer | None = None
        self._closed = False
        self._inode: int | None = None
        self._connections: dict[asyncio.Task[Any], _Connection] = {}
        # The open (not evicted) connections, least recently active first: a dict keeps insertion
        # order, and `_touch` re-inserts, so admission finds the eviction candidate at the front
        # instead of scanning every connection on every connect (issue 15 item 8's p99 under load).
        self._by_activity: dict[_Connection, None] = {}
        self._next_connection = 0

    @property
    def serving(self) -> bool:
        return self._server is not None

    async def start(self) -> Path:
        """Bind the socket and return its path. `DshError("SOCKET_IN_USE")` if a live run holds it."""
        if self._server is not None or self._closed:
            raise RuntimeError("a ControlServer starts once; build a new one to serve again")
        _prepare_directory(self.path.parent)
        await _clear_stale(self.path)
        server = await asyncio.start_unix_server(
            self._serve, path=os.fspath(self.path), limit=MAX_LINE_BYTES, backlog=_BACKLOG
        )
        # Right after bind (§18.1); the 0700 directory already keeps others out of the window before.
        os.chmod(self.path, 0o600)
        self._inode = os.stat(self.path).st_ino
        self._server = server
        logger.info("control socket listening at %s", self.path)
        return self.path

    async def close(self) -> None:
        """Stop accepting, end every connection after its in-flight request, unlink the socket."""
        server, self._server = self._server, None
        if server is None:
            return
        self._closed = True
        server.close()
        # A connection waiting for a line is closed now; one handling a request sees the abort
        # (an in-flight delivery gives up), writes its answer and then ends, since `_server` is
        # None. Handlers are never cancelled: a followup runs inside the child lock, and abandoning
        # it midway would cut a materialization short.
        self._controller.abort({"kind": "disposed"})
        for connection in list(self._connections.values()):
            if not connection.busy:
                connection.writer.close()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()
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

    # -- connections ----------------------------------------------------------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._next_connection += 1
        # Named per STYLE §7; tests also use the `host:` prefix to tell the handler's own calls
        # from the runtime's reactions (matrix 108).
        task.set_name(f"host:connection:{self._next_connection}")
        connection = self._connections[task] = _Connection(writer, asyncio.get_running_loop().time())
        self._by_activity[connection] = None
        try:
            if not self._peer_allowed(writer) or not self._admit(connection):
                return
            await self._converse(reader, connection)
        except ConnectionError:
            logger.debug("control connection dropped", exc_info=True)
        except Exception:  # last line of defence for one connection: close it, keep the run quiet
            logger.debug("control connection closed after an unexpected error", exc_info=True)
        finally:
            del self._connections[task]
            self._by_activity.pop(connection, None)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _admit(self, connection: _Connection) -> bool:
        """Make room under the cap by closing the least recently active idle connection; False
        (close this one) when every other connection is handling a request."""
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
        # Counted out at once: its task leaves `_connections` only when it ends, and counting it
        # until then would let the next arrivals evict a second, third... connection for one slot.
        oldest.evicted = True
        del self._by_activity[oldest]
        oldest.writer.close()
        return True

    def _longest_idle(self, settled: float, new: _Connection) -> _Connection | None:
        """The least recently active open connection, not busy, silent since `settled`, other than
        `new`. `_by_activity` is in `last_active` order, so the walk stops at the first one active
        after `settled` and passes only busy ones (at most one per request in hand) before that."""
        for candidate in self._by_activity:
            if candidate.last_active > settled:
                return None
            if candidate is not new and not candidate.busy:
                return candidate
        return None

    def _touch(self, connection: _Connection, now: float) -> None:
        connection.last_active = now
        if connection in self._by_activity:  # not when evicted meanwhile
            del self._by_activity[connection]
            self._by_activity[connection] = None

    async def _converse(self, reader: asyncio.StreamReader, connection: _Connection) -> None:
        loop = asyncio.get_running_loop()
        while self._server is not None:
            try:
                async with asyncio.timeout(self._idle_timeout):
                    line = await reader.readuntil(b"\n")
            except TimeoutError:
                logger.debug("control connection idle for %ss; closing it", self._idle_timeout)
                return
            except asyncio.IncompleteReadError as exc:
                line = exc.partial  # EOF: handle a last unterminated line, then stop
                if line.strip():
                    await self._answer(connection, line)
                return
            except asyncio.LimitOverrunError:
                # debug, not warning: a peer's bad frame must not reach the run's stderr (issue 15)
                logger.debug("control request over %d bytes; closing the connection", MAX_LINE_BYTES)
                error = bad_request(INVALID_REQUEST, f"line longer than {MAX_LINE_BYTES} bytes")
                await _write(connection.writer, _error_response(None, error))
                return
            if line.strip():
                await self._answer(connection, line)
            self._touch(connection, loop.time())

    async def _answer(self, connection: _Connection, line: bytes) -> None:
        connection.busy = True
        try:
            response = await self._respond(line)
            if response is not None:
                await _write(connection.writer, response)
        finally:
            connection.busy = False

    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        if not sys.platform.startswith("linux") or not hasattr(socket, "SO_PEERCRED"):
            return True  # §18.1 SHOULD: the 0700 directory is the guard elsewhere
        sock = writer.get_extra_info("socket")
        if sock is None:
            return False
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", raw)
        if uid != self._peer_uid:
            logger.warning("refused control connection from pid %d, uid %d", pid, uid)
            return False
        return True

    # -- one request ----------------------------------------------------------------------------
    async def _respond(self, line: bytes) -> dict[str, Any] | None:
        """The response object for one line, or None for a notification."""
        try:
            # Issue 15 item 5: one bounded decoder, so deep nesting, lone surrogates, NaN, invalid
            # UTF-8 and 5,000-digit integers all end here as a bad-request, never as a traceback.
            request = loads_bounded(line.decode("utf-8"))
        except UnicodeDecodeError:
            return _error_response(None, bad_request(PARSE_ERROR, "the line is not valid JSON"))
        except JsonProblem as exc:
            return _error_response(None, bad_request(PARSE_ERROR, f"the line is not valid JSON: {exc.msg}"))
        if isinstance(request, list):
            return _error_response(None, bad_request(INVALID_REQUEST, "batches are not supported"))
        if not isinstance(request, dict):
            return _error_response(None, bad_request(INVALID_REQUEST, "a request must be a JSON object"))
        request_id = request.get("id", _NO_ID)
        if request_id is not _NO_ID and not _is_valid_id(request_id):
            return _error_response(None, bad_request(INVALID_REQUEST, "id must be a string, an integer or null"))
        reply_id = None if request_id is _NO_ID else request_id
        problem = _envelope_problem(request)
        if problem is not None:
            return _error_response(reply_id, bad_request(INVALID_REQUEST, problem))
        try:
            result = await self._methods.call(request["method"], request.get("params"))
            body: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": reply_id, "result": result}
            json.dumps(body, allow_nan=False)  # fail here, as `internal`, not while writing
        except RpcError as exc:
            body = _error_response(reply_id, exc)
        except Exception:
            logger.exception("control method %s failed", request["method"])
            body = _error_response(reply_id, internal())
        return None if request_id is _NO_ID else body


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    last_active: float  # loop time of the connect or of the last answered line
    busy: bool = False  # between reading a request line and writing its answer
    evicted: bool = False  # closed by the cap; its task may still be ending


def _envelope_problem(request: dict[str, Any]) -> str | None:
    if request.get("jsonrpc") != JSONRPC_VERSION:
        return 'jsonrpc must be "2.0"'
    if not isinstance(request.get("method"), str):
        return "method must be a string"
    extra = sorted(set(request) - _ENVELOPE_KEYS)
    if extra:
        return f"unknown request members {', '.join(extra)}"
    return None


def _is_valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


def _error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error.to_wire()}


async def _write(writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode() + b"\n"
    writer.write(data)
    await writer.drain()


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
