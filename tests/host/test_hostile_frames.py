"""Issue 15 item 5 (control RPC): every frame, whatever its nesting, encoding or size, gets a
`bad-request` answer or a closed connection, and nothing is logged at warning level or above (the
level that would reach a run's stderr). Driven against a real `ControlServer` over its socket.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from dsh.loader.host import MAX_LINE_BYTES


def _request(method: str = "run.status", params: Any = None, request_id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return body


def _line(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode()  # ensure_ascii: lone surrogates go out as \ud800 escapes


CHILD = "00000000-0000-4000-8000-000000000000"

FRAMES = {
    "nested-100k-arrays": b"[" * 100_000 + b"]" * 100_000,
    "nested-200-in-params": _line(_request("subagent.list", {"parentSessionId": CHILD, "x": json.loads("[" * 200 + "]" * 200)})),
    "nested-100k-objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "lone-surrogate-id": _line(_request(request_id="\ud800")),
    "lone-surrogate-method": _line(_request(method="run.\udfff")),
    "lone-surrogate-key": b'{"jsonrpc":"2.0","id":1,"method":"run.status","params":{"\\ud800":1}}',
    "lone-surrogate-message": _line(_request("subagent.prompt", {"parentSessionId": CHILD, "childSessionId": CHILD, "message": "hi \udc80"})),
    "invalid-utf8": b'{"jsonrpc":"2.0","id":1,"method":"run.\xc3\x28"}',
    "overlong-utf8": b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xafrun.status"}',
    "utf16-bom": '{"jsonrpc":"2.0","id":1,"method":"run.status"}'.encode("utf-16"),
    "int-5000-digits-id": b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"run.status"}',
    "infinity": b'{"jsonrpc":"2.0","id":1,"method":"run.status","params":{"x":Infinity}}',
    "dotdot-child": _line(_request("subagent.interrupt", {"parentSessionId": CHILD, "childSessionId": "a..b"})),
    "long-child": _line(_request("subagent.interrupt", {"parentSessionId": CHILD, "childSessionId": "a" * 300})),
    "nul-bytes": b"\x00" * 1000,
}


@pytest.mark.parametrize("frame", list(FRAMES))
async def test_a_hostile_frame_gets_bad_request_and_the_connection_stays_usable(start_run, connect, caplog, frame):
    run = await start_run()
    conn = await connect(run.server.path)

    with caplog.at_level(logging.DEBUG):
        raw, response = await conn.exchange(FRAMES[frame])
        _, status = await conn.exchange(_line(_request()))

    assert response["jsonrpc"] == "2.0"
    assert response["error"]["data"]["code"] == "bad-request", response
    assert response["error"]["message"].startswith("malformed request: ")
    raw.decode("utf-8")  # the answer itself is UTF-8
    assert status["result"]["rootSessionId"] == run.root.id
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_an_oversize_line_is_answered_then_closed_without_a_warning(start_run, connect, caplog):
    run = await start_run()
    conn = await connect(run.server.path)

    with caplog.at_level(logging.DEBUG):
        _, response = await conn.exchange(b"[" * (MAX_LINE_BYTES + 10))
        rest = await conn.reader.read()

    assert response["error"]["data"]["code"] == "bad-request"
    assert rest == b""  # closed
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


# -- issue 15 item 8: idle timeout and connection cap -----------------------------------------------
async def _closed(conn) -> bool:
    """True once the server has closed `conn` (EOF); a 5 s backstop fails loudly."""
    import asyncio

    return await asyncio.wait_for(conn.reader.read(), 5) == b""


async def test_an_idle_connection_is_closed_after_the_idle_timeout(start_run, connect):
    run = await start_run(idle_timeout=0.2)
    idle = await connect(run.server.path)
    active = await connect(run.server.path)

    _, answer = await active.exchange(_line(_request()))

    assert answer["result"]["rootSessionId"] == run.root.id
    assert await _closed(idle)


async def test_over_the_cap_the_longest_idle_connection_makes_room(start_run, connect):
    run = await start_run(max_connections=3, fresh_seconds=0.0)
    first = await connect(run.server.path)
    _, warm = await first.exchange(_line(_request()))  # the server has now registered `first`
    others = [await connect(run.server.path) for _ in range(2)]
    for conn in others:
        await conn.exchange(_line(_request()))

    newest = await connect(run.server.path)
    _, answer = await newest.exchange(_line(_request()))

    assert warm["result"]["rootSessionId"] == answer["result"]["rootSessionId"] == run.root.id
    assert await _closed(first)
    for conn in others:  # still served
        assert (await conn.exchange(_line(_request())))[1]["result"]["rootSessionId"] == run.root.id


async def test_over_the_cap_the_least_recently_active_connection_goes_not_the_first_opened(start_run, connect):
    """Activity, not connect order, decides (issue 13/15: admission walks connections in activity
    order instead of scanning them all): `first` answers again after the others, so `second`,
    silent since its one request, is the one closed."""
    run = await start_run(max_connections=3, fresh_seconds=0.0)
    first, second, third = [await connect(run.server.path) for _ in range(3)]
    for conn in (first, second, third, first):
        await conn.exchange(_line(_request()))

    newest = await connect(run.server.path)
    _, answer = await newest.exchange(_line(_request()))

    assert answer["result"]["rootSessionId"] == run.root.id
    assert await _closed(second)
    for conn in (first, third):  # still served
        assert (await conn.exchange(_line(_request())))[1]["result"]["rootSessionId"] == run.root.id


async def test_fresh_connections_are_kept_and_beyond_twice_the_cap_a_new_one_is_refused(start_run, connect):
    """A connection silent for under `fresh_seconds` may have its line in flight, so the cap does not
    close it; with none idle, twice the cap are admitted and the next one is closed at once."""
    run = await start_run(max_connections=1, fresh_seconds=3600.0)
    kept = [await connect(run.server.path) for _ in range(2)]
    for conn in kept:
        await conn.exchange(_line(_request()))

    refused = await connect(run.server.path)

    assert await _closed(refused)
    for conn in kept:
        assert (await conn.exchange(_line(_request())))[1]["result"]["rootSessionId"] == run.root.id
