"""Transport of the control socket (SPEC §18.1, §18.3 bad-request rows; matrix 110, 111).

Server and clients share the test's loop: raw lines go through asyncio streams, the real client
(`call_sync`, blocking) runs in a worker thread. Nothing is ordered by sleeping: each exchange
awaits its response line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.errors import DshError
from dsh.loader.host import MAX_LINE_BYTES, ControlServer, NoLiveRun, RpcError, RpcTransportError, call_sync

from .conftest import expected_primary


def status_line(request_id: Any = 1) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "run.status"}).encode()


@pytest.mark.parametrize(
    "home",
    [pytest.param("short", id="m111-primary"), pytest.param("long", id="m111-long-home-fallback")],
    indirect=True,
)
async def test_socket_is_0600_in_a_0700_directory_and_removed_at_close(start_run, home: Path) -> None:
    """Matrix 111: a run serves a 0600 socket in a 0700 directory; the client finds it from the
    home and root id alone; close removes it, after which the client sees no live run."""
    run = await start_run()
    path = run.server.path
    if len(os.fsencode(expected_primary(home, run.root.id))) > 100:
        assert path.parent.parent == Path(os.environ["XDG_RUNTIME_DIR"])
        assert path.parent.name.startswith(f"dsh-{os.getuid()}-")
    else:
        assert path == expected_primary(home, run.root.id)
    st = os.stat(path)
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700

    result = await asyncio.to_thread(call_sync, home, run.root.id, "run.status", {})
    assert result["rootSessionId"] == run.root.id

    await run.server.close()
    assert not os.path.lexists(path)
    with pytest.raises(NoLiveRun):
        await asyncio.to_thread(call_sync, home, run.root.id, "run.status", {})


def test_the_long_home_really_exceeds_the_limit(tmp_path: Path) -> None:
    """Guards the fixture: the "long" home must force the fallback, the "short" one must not."""
    from dsh.loader.host.paths import MAX_SOCKET_PATH_BYTES

    root = "session-00000000-0000-4000-8000-000000000000"
    long_home = tmp_path / ("deep-" * 16) / "home"
    assert len(os.fsencode(expected_primary(long_home, root))) > MAX_SOCKET_PATH_BYTES
    assert len(os.fsencode(expected_primary(Path("/tmp/dsh-12345678/h"), root))) <= MAX_SOCKET_PATH_BYTES


async def test_stale_socket_is_replaced_at_start(make_tree, home: Path, caplog) -> None:
    """Matrix 111: a leftover socket nobody listens on is unlinked, then bound afresh."""
    tree = await make_tree({"root": {"replies": []}})
    root = await tree.create_root()
    server = ControlServer(tree, root, state=lambda: "running")
    server.path.parent.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(server.path))  # bound, never listening: what a crashed run leaves behind
    with caplog.at_level("INFO", logger="dsh.loader.host.server"):
        await server.start()
    try:
        assert any("removed stale control socket" in r.getMessage() for r in caplog.records)
        result = await asyncio.to_thread(call_sync, home, root.id, "run.status", {})
        assert result["rootSessionId"] == root.id
    finally:
        await server.close()


async def test_socket_of_a_live_run_is_never_taken_over(start_run, home: Path) -> None:
    run = await start_run()
    rival = ControlServer(run.tree, run.root, state=lambda: "running")
    with pytest.raises(DshError) as info:
        await rival.start()
    assert info.value.code == "SOCKET_IN_USE"
    result = await asyncio.to_thread(call_sync, home, run.root.id, "run.status", {})
    assert result["rootSessionId"] == run.root.id


async def test_socket_directory_that_is_a_symlink_is_refused(make_tree, home: Path, tmp_path: Path) -> None:
    tree = await make_tree({"root": {"replies": []}})
    root = await tree.create_root()
    server = ControlServer(tree, root, state=lambda: "running")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    server.path.parent.parent.mkdir(parents=True, exist_ok=True)
    server.path.parent.symlink_to(elsewhere)
    with pytest.raises(DshError) as info:
        await server.start()
    assert info.value.code == "SOCKET_DIR_UNSAFE"
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(
    ("line", "code"),
    [
        pytest.param(b"{not json", -32700, id="m110-malformed-line"),
        pytest.param(b'{"jsonrpc":"2.0","id":7,"method":"run.explode"}', -32601, id="m110-unknown-method"),
        pytest.param(b'{"jsonrpc":"2.0","id":7,"method":"subagent.interrupt"}', -32602, id="m110-missing-params"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"subagent.interrupt","params":'
            b'{"parentSessionId":"p","childSessionId":"c","mode":"one-shot"}}',
            -32602,
            id="m110-mode-one-shot",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"subagent.list","params":{"parentSessionId":"p","extra":1}}',
            -32602,
            id="unknown-param-key",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"subagent.prompt","params":'
            b'{"parentSessionId":"p","childSessionId":"c","message":""}}',
            -32602,
            id="empty-message",
        ),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"subagent.list","params":["p"]}', -32602, id="positional-params"
        ),
        pytest.param(b'{"jsonrpc":"2.0","id":7,"method":"run.status","params":{"x":1}}', -32602, id="status-extra"),
        pytest.param(b'[{"jsonrpc":"2.0","id":7,"method":"run.status"}]', -32600, id="batch-rejected"),
        pytest.param(b'"just a string"', -32600, id="not-an-object"),
        pytest.param(b'{"id":7,"method":"run.status"}', -32600, id="no-jsonrpc-member"),
        pytest.param(b'{"jsonrpc":"2.0","id":7,"method":"run.status","extra":1}', -32600, id="unknown-member"),
        pytest.param(b'{"jsonrpc":"2.0","id":[7],"method":"run.status"}', -32600, id="bad-id"),
        pytest.param(b"\xff\xfe{}", -32700, id="invalid-utf8"),
        pytest.param(b'{"jsonrpc":"2.0","id":NaN,"method":"run.status"}', -32700, id="nan-is-not-json"),
    ],
)
async def test_bad_request_is_answered_and_the_connection_stays_usable(
    start_run, connect, line: bytes, code: int
) -> None:
    """Matrix 110 (and §22 row "malformed RPC line"): a `bad-request` answer, then the same
    connection serves the next request, and the agents are unaffected."""
    run = await start_run()
    conn = await connect(run.server.path)
    raw, response = await conn.exchange(line)
    error = response["error"]
    assert error["code"] == code
    assert error["data"]["code"] == "bad-request"
    assert error["message"].startswith("malformed request: ")
    assert "result" not in response
    assert response["id"] in (7, None)
    after = await conn.request("run.status", id=8)
    assert after["id"] == 8
    statuses = {a["sessionId"]: a["status"] for a in after["result"]["agents"]}
    assert statuses[run.child_id] == "running"


async def test_notification_runs_but_gets_no_response(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    params = {"parentSessionId": run.root.id, "childSessionId": run.child_id}
    await conn.send_line(json.dumps({"jsonrpc": "2.0", "method": "subagent.interrupt", "params": params}).encode())
    await conn.send_line(json.dumps({"jsonrpc": "2.0", "method": "no.such.method"}).encode())
    response = await conn.request("run.status", id="after")
    assert response["id"] == "after"  # the first line on the wire answers the third request
    # The notified interrupt took effect: the child's turn ended, aborted by the user.
    await asyncio.wait_for(run.child.when_idle(), 5)
    ends = [e["data"]["reason"] for e in run.child.session.events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": {"kind": "user"}}]


async def test_requests_on_one_connection_are_answered_in_order(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    lines = b"".join(status_line(i) + b"\n" for i in range(5))
    conn.writer.write(lines)  # all at once: the server still answers one after the other
    await conn.writer.drain()
    ids = [json.loads(await asyncio.wait_for(conn.reader.readline(), 5))["id"] for _ in range(5)]
    assert ids == [0, 1, 2, 3, 4]


async def test_line_of_exactly_one_mebibyte_is_accepted(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    skeleton = status_line("")
    padding = "x" * (MAX_LINE_BYTES - len(skeleton))
    line = status_line(padding)
    assert len(line) == MAX_LINE_BYTES
    _raw, response = await conn.exchange(line)
    assert response["id"] == padding and "result" in response


async def test_oversize_line_gets_an_error_and_the_connection_is_closed(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    line = status_line("x" * (MAX_LINE_BYTES - len(status_line("")) + 1))
    assert len(line) == MAX_LINE_BYTES + 1
    conn.writer.write(line + b"\n")
    with contextlib.suppress(ConnectionError):
        await conn.writer.drain()
    response = json.loads(await asyncio.wait_for(conn.reader.readline(), 5))
    assert response["id"] is None
    assert response["error"]["code"] == -32600 and response["error"]["data"]["code"] == "bad-request"
    try:
        rest = await asyncio.wait_for(conn.reader.read(), 5)
    except ConnectionResetError:
        rest = b""
    assert rest == b""
    # Other connections are unaffected.
    other = await connect(run.server.path)
    assert (await other.request("run.status"))["result"]["rootSessionId"] == run.root.id


async def test_client_reports_an_oversize_request_as_bad_request(start_run, home: Path) -> None:
    run = await start_run()
    params = {"parentSessionId": run.root.id, "childSessionId": run.child_id, "message": "m" * MAX_LINE_BYTES}
    events_before = len(run.child.session.events)
    with pytest.raises(RpcError) as info:
        await asyncio.to_thread(call_sync, home, run.root.id, "subagent.prompt", params)
    assert (info.value.code, info.value.data_code) == (-32600, "bad-request")
    assert len(run.child.session.events) == events_before  # refused requests change no state (§22)


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="SO_PEERCRED is Linux-only")
async def test_peer_with_another_uid_is_disconnected_unanswered(start_run, home: Path, caplog) -> None:
    run = await start_run(peer_uid=os.getuid() + 1)
    with caplog.at_level("WARNING", logger="dsh.loader.host.server"), pytest.raises(RpcTransportError):
        await asyncio.to_thread(call_sync, home, run.root.id, "run.status", {}, 5)
    assert any(f"uid {os.getuid()}" in r.getMessage() for r in caplog.records)


async def test_close_ends_idle_connections(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    assert (await conn.request("run.status"))["id"] == 1
    await run.server.close()
    assert await asyncio.wait_for(conn.reader.read(), 5) == b""
    assert not run.server.serving


async def test_close_lets_an_in_flight_request_answer(start_run, connect) -> None:
    """Close while a request is being handled: that request still gets its answer, then EOF."""
    closing: list[asyncio.Future[None]] = []
    servers: list[ControlServer] = []

    def state_that_closes_the_server() -> str:
        # Runs inside the run.status handler, so the close begins while this request is in flight.
        closing.append(asyncio.ensure_future(servers[0].close()))
        return "shutting-down"

    run = await start_run(state=state_that_closes_the_server)
    servers.append(run.server)
    conn = await connect(run.server.path)
    response = await conn.request("run.status")
    assert response["result"]["state"] == "shutting-down"
    await asyncio.wait_for(closing[0], 5)
    assert await asyncio.wait_for(conn.reader.read(), 5) == b""
    assert not os.path.lexists(run.server.path)
