"""One control connection (SPEC §18.1): framing, ordering and flow control on a raw socket.

Why a raw non-blocking socket under `loop.add_reader`, not asyncio streams or even transports
(issue 15 item 8): under 100 closed-loop clients, each making one call per connection as
`dsh interrupt` does, the run's latency is its CPU per call, and most of that was asyncio's
per-connection machinery. Streams cost a reader, a writer, a task, a timeout scope and
`readuntil`/`drain` futures per connection; a transport still costs a task and a future to accept
it and three scheduled callbacks (made, add-reader, lost). Here a connection is one object and one
reader callback: accept, read, answer, EOF, close. A line whose method needs no await (everything
but `subagent.prompt`) is decoded, dispatched and answered inside that callback, which sees runtime
state between two loop iterations exactly as a task would. A line whose method awaits runs in a
task named `host:connection:N`, with reading stopped until its answer is written, so the lines of
one connection are still answered strictly in order.

Framing (the module docstring of `server.py` has the full list): lines end with `\\n` and hold at
most `MAX_LINE_BYTES` bytes; a longer one (or that many bytes without a newline) gets one
`bad-request` and the connection is closed; blank lines are skipped; at EOF a last unterminated line
is still answered. Flow control: an answer the socket does not take at once is kept and reading
stops until it is flushed, so a peer that sends without reading cannot grow the run's memory.

Invariant: no exception leaves a callback of this module: the loop would log it at error level,
i.e. on the run's stderr (issue 15 item 5). A socket error closes the connection, logged at debug.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Coroutine
from typing import Any, Protocol

from dsh.loader.host.protocol import MAX_LINE_BYTES

__all__ = ["Answer", "Connection", "Host"]

logger = logging.getLogger("dsh.loader.host.server")  # one logger for the whole control server

_READ_SIZE = 256 * 1024

Answer = bytes | Coroutine[Any, Any, bytes | None] | None
"""What `Host.dispatch` gives for a line: the encoded answer, a coroutine producing it (awaiting
methods), or None (a notification, answered by nothing)."""


class Host(Protocol):
    """What a connection needs from its server (`ControlServer` implements it)."""

    @property
    def serving(self) -> bool: ...
    def dispatch(self, line: bytes) -> Answer: ...
    def oversize(self) -> bytes: ...
    def touch(self, connection: Connection) -> None: ...
    def spawn(self, coro: Coroutine[Any, Any, None], connection: Connection) -> None: ...
    def lost(self, connection: Connection) -> None: ...


class Connection:
    """State of one accepted socket; its server tracks it by identity."""

    __slots__ = (
        "_buffer", "_closing", "_eof", "_fd", "_host", "_loop", "_out", "_reading", "_scanned",
        "busy", "last_active", "sock",
    )

    def __init__(self, host: Host, sock: socket.socket, loop: asyncio.AbstractEventLoop) -> None:
        self._host = host
        self._loop = loop
        self.sock = sock
        self._fd = sock.fileno()
        self.last_active = loop.time()  # loop time of the connect or of the last answered line
        self.busy = False  # a line is in hand: read and not yet answered (awaiting methods only)
        self._buffer = bytearray()
        self._scanned = 0  # bytes of `_buffer` already known to hold no newline
        self._out = b""  # answer bytes the socket has not taken yet
        self._eof = False
        self._closing = False  # close once `_out` is flushed
        self._reading = False

    def start(self) -> None:
        """Serve the connection; called right after accept. A client of ours sends its line right
        after connecting, so it is usually there already: read it now, and save the loop the
        round of registering the socket and waking for its first read."""
        self._on_readable(first=True)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # -- loop callbacks -----------------------------------------------------------------------------
    def _on_readable(self, first: bool = False) -> None:
        try:
            try:
                data = self.sock.recv(_READ_SIZE)
            except (BlockingIOError, InterruptedError):
                if first:
                    self._read(True)
                return
            if data:
                self._buffer += data
            else:
                self._eof = True
                self._read(False)
            self._drain_lines()
        except OSError as exc:
            logger.debug("control connection dropped: %r", exc)
            self.abort()
        except Exception:  # last line of defence: close it, keep the run quiet
            logger.debug("control connection closed after an unexpected error", exc_info=True)
            self.abort()

    def _on_writable(self) -> None:
        try:
            self._flush()
            if not self._out:
                self._loop.remove_writer(self._fd)
                if self._closing:
                    self.abort()
                else:
                    self._drain_lines()
        except OSError as exc:
            logger.debug("control connection dropped: %r", exc)
            self.abort()
        except Exception:
            logger.debug("control connection closed after an unexpected error", exc_info=True)
            self.abort()

    # -- closing ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close after anything already answered is flushed (idle timeout, cap, server close, EOF)."""
        if self._out and not self.closed:
            self._closing = True
            self._read(False)
        else:
            self.abort()

    def abort(self) -> None:
        """Close now. Idempotent; the server forgets the connection here."""
        if self.closed:
            return
        self._read(False)
        if self._out:
            self._loop.remove_writer(self._fd)
            self._out = b""
        self._fd = -1
        self._buffer = bytearray()
        self.sock.close()
        self._host.lost(self)

    # -- lines --------------------------------------------------------------------------------------
    def _drain_lines(self) -> None:
        """Answer every complete line in the buffer, in order, until one needs an await, the socket
        stops taking answers, or the buffer holds no complete line (then read on)."""
        while not self.busy and not self._out and not self._closing and not self.closed:
            if not self._host.serving:
                self.close()
                return
            buffer = self._buffer
            end = buffer.find(b"\n", self._scanned)
            if end < 0:
                if len(buffer) > MAX_LINE_BYTES:
                    self._refuse_oversize()
                elif not self._eof:
                    self._scanned = len(buffer)
                    self._read(True)
                elif buffer.strip():
                    line = bytes(buffer)
                    buffer.clear()
                    self._handle(line)
                    continue  # an awaiting last line closes once answered
                else:
                    self.close()
                return
            if end > MAX_LINE_BYTES:
                self._refuse_oversize()
                return
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            self._scanned = 0
            if line.strip():
                self._handle(line)
        if self._out or self.busy:
            self._read(False)

    def _handle(self, line: bytes) -> None:
        answer = self._host.dispatch(line)
        if answer is None:
            self._host.touch(self)
        elif isinstance(answer, bytes):
            self._write(answer)
            self._host.touch(self)
        else:
            self.busy = True
            self._read(False)
            self._host.spawn(self._finish(answer), self)

    async def _finish(self, answer: Coroutine[Any, Any, bytes | None]) -> None:
        try:
            data = await answer
            self.busy = False
            if data is not None:
                self._write(data)
            self._host.touch(self)
            self._drain_lines()
        except OSError as exc:
            logger.debug("control connection dropped: %r", exc)
            self.abort()
        except Exception:  # dispatch answers every failure itself; this is the backstop
            logger.debug("control connection closed after an unexpected error", exc_info=True)
            self.abort()
        finally:
            self.busy = False

    def _refuse_oversize(self) -> None:
        # debug, not warning: a peer's bad frame must not reach the run's stderr (issue 15)
        logger.debug("control request over %d bytes; closing the connection", MAX_LINE_BYTES)
        self._buffer = bytearray()
        self._write(self._host.oversize())
        self.close()

    # -- socket -------------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.closed:
            return
        self._out += data
        self._flush()
        if self._out:
            self._read(False)
            self._loop.add_writer(self._fd, self._on_writable)

    def _flush(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        self._out = self._out[sent:]

    def _read(self, on: bool) -> None:
        if on == self._reading or self.closed:
            return
        self._reading = on
        if on:
            self._loop.add_reader(self._fd, self._on_readable)
        else:
            self._loop.remove_reader(self._fd)
