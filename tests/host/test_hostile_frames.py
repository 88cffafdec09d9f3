"""Issue 15 item 5 (control RPC): every frame, whatever its nesting, encoding or size, gets a
`bad-request` answer or a closed connection, and nothing is logged at warning level or above (the
level that would reach a run's stderr). Driven against a real `ControlServer` over its socket.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from loader.host import MAX_LINE_BYTES


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
