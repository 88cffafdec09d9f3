"""One control connection on a raw socket (loader/host/connection.py, issue 15 item 8): partial
writes, half-closed peers, and ordering behind a method that awaits. Driven against a real
`ControlServer` over its socket; blocking peers run in worker threads so the loop keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest


def _status(request_id: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "run.status"}).encode()


def _read_lines(sock: socket.socket, count: int) -> list[dict[str, Any]]:
    sock.settimeout(10)  # backstop only: every line is awaited, never slept for
    buffered = b""
    while buffered.count(b"\n") < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            break
        buffered += chunk
    return [json.loads(line) for line in buffered.splitlines()]


def _connect(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    return sock


async def test_answers_larger_than_the_socket_buffers_arrive_complete_and_in_order(start_run) -> None:
    """2,000 pipelined requests (~110 KB, within what the kernel buffers for an unread socket)
    whose answers (~600 KB) are not read until all are sent: the socket takes only part of them,
    the server keeps the rest and flushes it as the peer reads, and every answer arrives in order."""
    run = await start_run()
    count = 2000
    sock = _connect(run.server.path)
    try:
        lines = b"".join(_status(i) + b"\n" for i in range(count))
        await asyncio.wait_for(asyncio.to_thread(sock.sendall, lines), 10)
        answers = await asyncio.to_thread(_read_lines, sock, count)
    finally:
        sock.close()
    assert sum(len(json.dumps(a)) for a in answers) > 256 * 1024
    assert [a["id"] for a in answers] == list(range(count))
    assert all(a["result"]["rootSessionId"] == run.root.id for a in answers)


@pytest.mark.parametrize("terminator", [b"\n", b""], ids=["terminated", "unterminated"])
async def test_a_half_closed_peer_still_gets_its_answer_then_eof(start_run, terminator: bytes) -> None:
    """A peer that sends its line and shuts its side down (EOF in the same read or the next) is
    answered, then closed; an unterminated last line counts as a line (§18.1 decision)."""
    run = await start_run()
    sock = _connect(run.server.path)
    try:
        sock.sendall(_status("last") + terminator)
        sock.shutdown(socket.SHUT_WR)
        answers = await asyncio.to_thread(_read_lines, sock, 2)  # 2: read on to the EOF
    finally:
        sock.close()
    assert [a["id"] for a in answers] == ["last"]
    assert answers[0]["result"]["rootSessionId"] == run.root.id


async def test_a_line_behind_an_awaiting_method_is_answered_after_it(start_run) -> None:
    """`subagent.prompt` awaits the delivery, in a task; `run.status` needs no await and would be
    answered at once. Sent in one write, the two are still answered in the order sent."""
    run = await start_run()
    prompt = {"jsonrpc": "2.0", "id": "prompt", "method": "subagent.prompt",
              "params": {"parentSessionId": run.root.id, "childSessionId": run.child_id, "message": "more"}}
    sock = _connect(run.server.path)
    try:
        sock.sendall(json.dumps(prompt).encode() + b"\n" + _status("status") + b"\n")
        answers = await asyncio.to_thread(_read_lines, sock, 2)
    finally:
        sock.close()
    assert [a["id"] for a in answers] == ["prompt", "status"]
    assert "messageId" in answers[0]["result"]
    assert answers[1]["result"]["rootSessionId"] == run.root.id


def _read_to_eof(sock: socket.socket) -> bytes:
    sock.settimeout(10)  # backstop only
    chunks = []
    try:
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


async def test_close_does_not_wait_forever_for_a_peer_that_never_reads(start_run) -> None:
    """A peer sends 2,000 requests and reads none of the ~600 KB of answers: the server's close
    gives the kept answers a bounded grace (1 s), then drops the connection and finishes."""
    run = await start_run()
    sock = _connect(run.server.path)
    try:
        lines = b"".join(_status(i) + b"\n" for i in range(2000))
        await asyncio.wait_for(asyncio.to_thread(sock.sendall, lines), 10)
        await asyncio.wait_for(asyncio.to_thread(sock.recv, 1, socket.MSG_PEEK), 10)  # answering
        await asyncio.wait_for(run.server.close(), 10)  # backstop only; the grace is 1 s
        assert not run.server.serving
        received = await asyncio.to_thread(_read_to_eof, sock)  # what the kernel holds, then EOF
    finally:
        sock.close()
    assert 0 < received.count(b"\n") < 2000  # answering had begun; dropped, not flushed to the end
