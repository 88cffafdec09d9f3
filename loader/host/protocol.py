"""Wire vocabulary of the host control RPC (SPEC §18.1–§18.3), shared by server and client.

This module is stdlib-only on purpose: `dsh interrupt` imports the client, which imports this, and
must start without pydantic or the runtime. The server's param models live in `methods.py`.

`RpcError` is the one error shape on both sides of the socket: the server raises it inside a
handler to answer with that error, and the client raises it when a response carries one. Its
`code` is the JSON-RPC integer; `data_code` is the stable string callers branch on (§18.3).

Invariant: every error object on the wire is `{code: int, message, data: {code: str, details}}` and
its `message` is one of the §18.3 strings below; exception text never reaches the wire.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = [
    "BAD_REQUEST",
    "DELIVERY_UNAVAILABLE",
    "INTERNAL",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "JSONRPC_VERSION",
    "MAX_LINE_BYTES",
    "METHODS",
    "METHOD_NOT_FOUND",
    "MSG_BAD_REQUEST",
    "MSG_DELIVERY_UNAVAILABLE",
    "MSG_INTERNAL",
    "MSG_NOT_RESUMABLE",
    "MSG_UNAUTHORIZED",
    "NOT_RESUMABLE",
    "PARSE_ERROR",
    "SUBAGENT_DELIVERY_UNAVAILABLE",
    "SUBAGENT_NOT_RESUMABLE",
    "SUBAGENT_UNAUTHORIZED",
    "UNAUTHORIZED",
    "DeliveryReason",
    "RpcError",
    "bad_request",
    "delivery_unavailable",
    "internal",
    "not_resumable",
    "unauthorized",
]

JSONRPC_VERSION = "2.0"
MAX_LINE_BYTES = 1 << 20
"""§18.1: one JSON object per line, at most 1 MiB (the terminating newline not counted)."""

METHODS = ("subagent.interrupt", "subagent.prompt", "subagent.list", "run.status")

# JSON-RPC integer codes (§18.3).
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
UNAUTHORIZED = -32001
NOT_RESUMABLE = -32002
DELIVERY_UNAVAILABLE = -32003
INTERNAL_ERROR = -32603

# Stable `data.code` strings (§18.3).
BAD_REQUEST = "bad-request"
SUBAGENT_UNAUTHORIZED = "subagent-unauthorized"
SUBAGENT_NOT_RESUMABLE = "subagent-not-resumable"
SUBAGENT_DELIVERY_UNAVAILABLE = "subagent-delivery-unavailable"
INTERNAL = "internal"

# Messages, verbatim from SPEC §18.3 ("our wording"). They live here rather than in loader/texts.py
# so the client stays importable without anything but the stdlib; keep them byte-exact with §18.3.
MSG_BAD_REQUEST = "malformed request: {detail}"
MSG_UNAUTHORIZED = "that child is not registered under the given parent"
MSG_NOT_RESUMABLE = "no resumable conversation exists for that child"
MSG_DELIVERY_UNAVAILABLE = "the message cannot be delivered right now"
MSG_INTERNAL = "the request failed inside dsh"

DeliveryReason = Literal["parent-not-live", "draining", "closing"]


class RpcError(Exception):
    """An RPC error response: raised by server handlers to answer with it, and by the client on
    receiving one. Branch on `data_code` (or `code`), never on `message`."""

    def __init__(self, code: int, data_code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.data_code = data_code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"RpcError({self.code}, {self.data_code!r}, {self.message!r}, {self.details!r})"

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "data": {"code": self.data_code, "details": self.details}}

    @classmethod
    def from_wire(cls, error: Any) -> RpcError:
        """Rebuild from a response's `error` member; a malformed one still yields an RpcError."""
        if not isinstance(error, dict):
            return cls(INTERNAL_ERROR, INTERNAL, MSG_INTERNAL)
        raw = error.get("data")
        data: dict[str, Any] = raw if isinstance(raw, dict) else {}
        code = error.get("code")
        details = data.get("details")
        return cls(
            code if type(code) is int else INTERNAL_ERROR,
            str(data.get("code", INTERNAL)),
            str(error.get("message", MSG_INTERNAL)),
            details if isinstance(details, dict) else {},
        )


def bad_request(code: int, detail: str, details: dict[str, Any] | None = None) -> RpcError:
    """-32700 / -32600 / -32601 / -32602: the request itself is at fault; no state changed."""
    return RpcError(code, BAD_REQUEST, MSG_BAD_REQUEST.format(detail=detail), details)


def unauthorized(child_session_id: str) -> RpcError:
    return RpcError(UNAUTHORIZED, SUBAGENT_UNAUTHORIZED, MSG_UNAUTHORIZED, {"childSessionId": child_session_id})


def not_resumable(child_session_id: str) -> RpcError:
    return RpcError(NOT_RESUMABLE, SUBAGENT_NOT_RESUMABLE, MSG_NOT_RESUMABLE, {"childSessionId": child_session_id})


def delivery_unavailable(child_session_id: str, reason: DeliveryReason) -> RpcError:
    return RpcError(
        DELIVERY_UNAVAILABLE,
        SUBAGENT_DELIVERY_UNAVAILABLE,
        MSG_DELIVERY_UNAVAILABLE,
        {"childSessionId": child_session_id, "reason": reason},
    )


def internal() -> RpcError:
    """Anything else. Details stay empty: the cause is logged locally, never sent (§18.3)."""
    return RpcError(INTERNAL_ERROR, INTERNAL, MSG_INTERNAL, {})
