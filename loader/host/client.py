"""Client side of the host control RPC (SPEC §18.4): address parsing, routing, one call per connection.

`dsh interrupt` and `dsh send` run this in a fresh process, so it imports only the stdlib and three
stdlib-only `loader` modules (errors, ids, texts): no pydantic, httpx or runtime. The synchronous
`call_sync` is the primary entry point; `call` runs it in a worker thread for async callers.

Routing is read-only (§5.6): it reads the first line of each `sessions/<id>/session.jsonl` on the
way up and never opens a file for writing, takes no lock and never repairs anything.

Errors (all `DshError`, branch on `code`), plus `RpcError` from `protocol` for error responses:

    RouteError                 the address cannot be mapped to a root session (CLI exit 2)
    ├── BadAddress             BAD_ADDRESS: not `<valid id>/<valid id>` (T-CLI-BAD-ADDRESS)
    ├── UnknownSession         UNKNOWN_SESSION: no session file on the way (T-CLI-UNKNOWN-SESSION)
    ├── NotAChild              NOT_A_CHILD: the child's header names another parent (T-CLI-UNAUTHORIZED)
    └── UnroutableSession      UNROUTABLE_SESSION: unreadable/newer header, parent cycle, > 64 hops
    NoLiveRun                  NO_LIVE_RUN: the socket is missing or refuses connections
    RpcTransportError          RPC_TRANSPORT: connected, but no usable response (timeout, EOF, junk)
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from dsh.loader.errors import DshError
from dsh.loader.host.paths import socket_path
from dsh.loader.host.protocol import JSONRPC_VERSION, MAX_LINE_BYTES, RpcError
from dsh.loader.ids import is_valid_session_id
from dsh.loader.texts import render

__all__ = [
    "MAX_HOPS",
    "BadAddress",
    "NoLiveRun",
    "NotAChild",
    "RouteError",
    "RpcTransportError",
    "UnknownSession",
    "UnroutableSession",
    "call",
    "call_sync",
    "check_address",
    "parse_address",
    "route",
]

MAX_HOPS = 64
_MAX_RESPONSE_BYTES = 64 * MAX_LINE_BYTES  # a response is ours, but a bound keeps a bad peer finite
_REQUEST_ID = 1

# Wording for conditions §19 leaves to the command (it prints T-CLI-NO-RUN or T-CLI-SEND-NO-RUN);
# these messages are for logs and tracebacks. Candidates for loader/texts.py (T-HOST-*).
_MSG_NO_LIVE_RUN = "no running dsh process listens on {path}"
_MSG_UNROUTABLE = "cannot route {id}: {problem}"
_MSG_TRANSPORT = "the dsh process at {path} gave no usable response: {problem}"


class RouteError(DshError):
    """The address cannot be mapped to a root session; nothing was sent (CLI exit 2)."""


class BadAddress(RouteError):
    def __init__(self, value: str) -> None:
        super().__init__("BAD_ADDRESS", render("T-CLI-BAD-ADDRESS", value=value))
        self.value = value


class UnknownSession(RouteError):
    def __init__(self, session_id: str, home: Path) -> None:
        super().__init__("UNKNOWN_SESSION", render("T-CLI-UNKNOWN-SESSION", id=session_id, home=home))
        self.session_id = session_id


class UnroutableSession(RouteError):
    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__("UNROUTABLE_SESSION", _MSG_UNROUTABLE.format(id=session_id, problem=problem))
        self.session_id = session_id


class NotAChild(RouteError):
    """The child's saved header names another parent (or none: a root is nobody's child)."""

    def __init__(self, child_id: str, parent_id: str) -> None:
        super().__init__("NOT_A_CHILD", render("T-CLI-UNAUTHORIZED", child=child_id, parent=parent_id))
        self.child_id = child_id
        self.parent_id = parent_id


class NoLiveRun(DshError):
    """No process serves the root's socket: for `interrupt` an accepted no-op, for `send` a failure."""

    def __init__(self, root_id: str, path: Path) -> None:
        super().__init__("NO_LIVE_RUN", _MSG_NO_LIVE_RUN.format(path=path))
        self.root_id = root_id
        self.path = path


class RpcTransportError(DshError):
    """A run accepted the connection but no response could be read; the request may have run."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__("RPC_TRANSPORT", _MSG_TRANSPORT.format(path=path, problem=problem))
        self.path = path


def _is_session_id(value: str) -> bool:
    return is_valid_session_id(value)  # the one validator (issue 15 items 4, 6)


def parse_address(value: str) -> tuple[str, str]:
    """`<parentSessionId>/<childSessionId>` → `(parent, child)`; anything else is `BadAddress`."""
    parent, sep, child = value.partition("/")
    if not sep or not _is_session_id(parent) or not _is_session_id(child):
        raise BadAddress(value)
    return parent, child


def route(home: Path, parent_id: str, child_id: str) -> str:
    """The root session id whose run would host `child_id` (§18.4).

    Walks `parentSession` links from the child's header to a header without a parent; when the child
    has no session file yet (or any more), walks from the parent instead. Reads one line per session.
    """
    if not _is_session_id(parent_id) or not _is_session_id(child_id):
        raise BadAddress(f"{parent_id}/{child_id}")
    home = Path(home)
    try:
        start, header = child_id, _read_header(home, child_id)
    except UnknownSession:
        try:
            start, header = parent_id, _read_header(home, parent_id)
        except UnknownSession:
            raise UnknownSession(child_id, home) from None
    visited = {start}
    current = start
    hops = 0
    while True:
        parent = header.get("parentSession")
        if parent is None:
            return current
        if not isinstance(parent, str) or not _is_session_id(parent):
            raise UnroutableSession(current, "its parentSession is not a valid session id")
        if parent in visited:
            raise UnroutableSession(start, f"the parent links loop back to {parent}")
        hops += 1
        if hops > MAX_HOPS:
            raise UnroutableSession(start, f"more than {MAX_HOPS} parent links")
        visited.add(parent)
        current = parent
        header = _read_header(home, current)


def check_address(home: Path, parent_id: str, child_id: str) -> None:
    """Issue 15 item 4: the address must name a saved child of that parent. `UnknownSession` when the
    child has no session file, `NotAChild` when its header names another parent or none (so
    `<root>/<root>` and `<child>/<root>` are refused). Read-only, like `route`: the run's own check
    stays authoritative, this one gives the honest answer before anything is sent."""
    header = _read_header(Path(home), child_id)
    if header.get("parentSession") != parent_id:
        raise NotAChild(child_id, parent_id)


def _read_header(home: Path, session_id: str) -> dict[str, Any]:
    """Line 1 of the session file, checked just enough to trust its `parentSession`."""
    path = home / "sessions" / session_id / "session.jsonl"
    try:
        with open(path, "rb") as f:  # read-only; never locks or repairs (§5.6)
            line = f.readline(MAX_LINE_BYTES + 1)
    except (FileNotFoundError, NotADirectoryError):
        raise UnknownSession(session_id, home) from None
    except OSError as exc:
        raise UnroutableSession(session_id, f"its session file cannot be read ({exc.strerror})") from None
    try:
        header = json.loads(line)
    except ValueError:
        raise UnroutableSession(session_id, "its header line is not JSON") from None
    if not isinstance(header, dict) or header.get("type") != "session" or header.get("id") != session_id:
        raise UnroutableSession(session_id, "its first line is not its session header")
    version = header.get("version")
    if type(version) is not int or version < 1:
        raise UnroutableSession(session_id, "its header has no valid version")
    if version > 1:
        # NEWER_FORMAT is decided before anything else (§5.1): a newer writer may mean other links.
        raise UnroutableSession(session_id, f"its format version {version} is newer than 1")
    return header


def call_sync(
    home: Path, root_id: str, method: str, params: dict[str, Any], timeout: float = 10
) -> dict[str, Any]:
    """Send one request to the run hosting `root_id` and return its `result`.

    Raises `NoLiveRun` (socket missing or refusing), `RpcError` (an error response),
    `RpcTransportError` (no usable response within `timeout` seconds, all reads included).
    """
    path = socket_path(home, root_id)
    request = {"jsonrpc": JSONRPC_VERSION, "id": _REQUEST_ID, "method": method, "params": params}
    data = json.dumps(request, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode() + b"\n"
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as exc:
            raise NoLiveRun(root_id, path) from exc
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may have answered (an oversize line) and closed: read what it said
        except TimeoutError:
            raise RpcTransportError(path, f"sending timed out after {timeout}s") from None
        line = _read_line(sock, path, deadline, timeout)
    return _result_of(line, path)


async def call(
    home: Path, root_id: str, method: str, params: dict[str, Any], timeout: float = 10
) -> dict[str, Any]:
    """`call_sync` in a worker thread, so an event loop (a test, or another run) keeps serving."""
    import asyncio  # deferred: the CLI path is synchronous and should not pay for asyncio

    return await asyncio.to_thread(call_sync, home, root_id, method, params, timeout)


def _read_line(sock: socket.socket, path: Path, deadline: float, timeout: float) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RpcTransportError(path, f"no response within {timeout}s")
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            raise RpcTransportError(path, f"no response within {timeout}s") from None
        except ConnectionResetError:
            chunk = b""  # the server closed with our unread bytes queued; what it sent is above
        if not chunk:
            raise RpcTransportError(path, "the connection closed before a response")
        nl = chunk.find(b"\n")
        if nl >= 0:
            chunks.append(chunk[:nl])
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > _MAX_RESPONSE_BYTES:
            raise RpcTransportError(path, "the response is too long")


def _result_of(line: bytes, path: Path) -> dict[str, Any]:
    try:
        response = json.loads(line)
    except ValueError:
        raise RpcTransportError(path, "the response is not JSON") from None
    if not isinstance(response, dict) or response.get("jsonrpc") != JSONRPC_VERSION:
        raise RpcTransportError(path, "the response is not a JSON-RPC 2.0 object")
    if "error" in response and response.get("id") in (_REQUEST_ID, None):
        # id null: the server rejected the line before reading our id (parse error, oversize line).
        raise RpcError.from_wire(response["error"])
    if response.get("id") != _REQUEST_ID or not isinstance(response.get("result"), dict):
        raise RpcTransportError(path, "the response does not answer the request")
    result: dict[str, Any] = response["result"]
    return result
