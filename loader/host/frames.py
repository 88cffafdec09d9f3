"""One request line to its encoded answer (SPEC §18.1–§18.3), for `server.py`'s connections.

Decoding, envelope checks and encoding live here, the socket handling in `connection.py` and the
methods in `methods.py`. The rules are in `server.py`'s module docstring: parse errors and invalid
requests are always answered (id null when the id is unusable); a valid request without `id` is a
notification (it runs, nothing is sent); unknown envelope members make a request invalid; batches
are refused.

Invariant: a handler failure never crosses the connection boundary as text: unexpected exceptions
are logged here with `logger.exception` and answered with the fixed `internal` error (§18.3).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Coroutine
from typing import Any

from dsh.loader.boundedjson import JsonProblem, loads_bounded
from dsh.loader.host.connection import Answer
from dsh.loader.host.methods import Methods
from dsh.loader.host.protocol import (
    INVALID_REQUEST,
    JSONRPC_VERSION,
    MAX_LINE_BYTES,
    PARSE_ERROR,
    RpcError,
    bad_request,
    internal,
)

__all__ = ["OVERSIZE", "answer"]

logger = logging.getLogger("dsh.loader.host.server")  # one logger for the whole control server

_ENVELOPE_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_NO_ID = object()
# One encoder for every answer: `json.dumps` with options builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def answer(methods: Methods, line: bytes) -> Answer:
    """The encoded answer for one line, a coroutine producing it (an awaiting method), or None
    for a notification."""
    try:
        # Issue 15 item 5: one bounded decoder, so deep nesting, lone surrogates, NaN, invalid
        # UTF-8 and 5,000-digit integers all end here as a bad-request, never as a traceback.
        request = loads_bounded(line.decode("utf-8"))
    except UnicodeDecodeError:
        return _encode(_error_response(None, bad_request(PARSE_ERROR, "the line is not valid JSON")))
    except JsonProblem as exc:
        return _encode(_error_response(None, bad_request(PARSE_ERROR, f"the line is not valid JSON: {exc.msg}")))
    if isinstance(request, list):
        return _encode(_error_response(None, bad_request(INVALID_REQUEST, "batches are not supported")))
    if not isinstance(request, dict):
        return _encode(_error_response(None, bad_request(INVALID_REQUEST, "a request must be a JSON object")))
    request_id = request.get("id", _NO_ID)
    if request_id is not _NO_ID and not _is_valid_id(request_id):
        return _encode(_error_response(None, bad_request(INVALID_REQUEST, "id must be a string, an integer or null")))
    reply_id = None if request_id is _NO_ID else request_id
    problem = _envelope_problem(request)
    if problem is not None:
        return _encode(_error_response(reply_id, bad_request(INVALID_REQUEST, problem)))
    method = request["method"]
    try:
        outcome = methods.start(method, request.get("params"))
    except RpcError as exc:
        return None if request_id is _NO_ID else _encode(_error_response(reply_id, exc))
    except Exception:
        logger.exception("control method %s failed", method)
        return None if request_id is _NO_ID else _encode(_error_response(reply_id, internal()))
    if isinstance(outcome, dict):
        return None if request_id is _NO_ID else _encode_result(method, reply_id, outcome)
    return _awaited(method, request_id, outcome)


async def _awaited(method: str, request_id: Any, pending: Coroutine[Any, Any, dict[str, Any]]) -> bytes | None:
    """The answer of an awaiting method (`subagent.prompt`), encoded; None for a notification."""
    reply_id = None if request_id is _NO_ID else request_id
    try:
        result = await pending
    except RpcError as exc:
        return None if request_id is _NO_ID else _encode(_error_response(reply_id, exc))
    except Exception:
        logger.exception("control method %s failed", method)
        return None if request_id is _NO_ID else _encode(_error_response(reply_id, internal()))
    return None if request_id is _NO_ID else _encode_result(method, reply_id, result)


def _encode_result(method: str, reply_id: Any, result: dict[str, Any]) -> bytes:
    try:
        return _encode({"jsonrpc": JSONRPC_VERSION, "id": reply_id, "result": result})
    except (TypeError, ValueError):  # not JSON (UnicodeEncodeError is a ValueError): a bug of ours
        logger.exception("control method %s gave an answer that is not JSON", method)
        return _encode(_error_response(reply_id, internal()))


def _envelope_problem(request: dict[str, Any]) -> str | None:
    if request.get("jsonrpc") != JSONRPC_VERSION:
        return 'jsonrpc must be "2.0"'
    if not isinstance(request.get("method"), str):
        return "method must be a string"
    if not _ENVELOPE_KEYS.issuperset(request):
        return f"unknown request members {', '.join(sorted(set(request) - _ENVELOPE_KEYS))}"
    return None


def _is_valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (type(value) is int)


def _error_response(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "error": error.to_wire()}


def _encode(body: dict[str, Any]) -> bytes:
    return _ENCODER.encode(body).encode() + b"\n"


OVERSIZE = _encode(_error_response(None, bad_request(INVALID_REQUEST, f"line longer than {MAX_LINE_BYTES} bytes")))
"""The answer to a line over `MAX_LINE_BYTES`, after which the connection is closed."""
