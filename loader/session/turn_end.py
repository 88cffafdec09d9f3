"""The closed vocabulary of `turn/end.reason` (SPEC §6.10), one TypedDict per kind.

The JSON on disk is exactly these dicts: `{"kind": "completed"}`, `{"kind": "aborted", "reason":
<cause>}`, `{"kind": "error", "error": {"code", "message"[, "status"]}}`. Code that branches on a
reason matches `reason["kind"]` exhaustively and ends with `assert_never`, so adding a kind here
makes every unhandled match a type error rather than a silent fall-through.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict, get_args

from dsh.loader.abort import CancelCause

__all__ = [
    "TURN_END_KINDS",
    "AbortedEnd",
    "BlockedEnd",
    "CompletedEnd",
    "ErrorData",
    "ErrorEnd",
    "InterruptedEnd",
    "MaxTokensEnd",
    "TurnEnd",
    "TurnEndKind",
]

TurnEndKind = Literal["completed", "max-tokens", "aborted", "blocked", "error", "interrupted"]
TURN_END_KINDS: frozenset[str] = frozenset(get_args(TurnEndKind))
"""§6.10: the closed set of `turn/end.reason.kind` values."""


class ErrorData(TypedDict):
    """A failure as the log and `agent/error` carry it: a stable code, a message for people."""

    code: str
    message: str
    status: NotRequired[int]


class CompletedEnd(TypedDict):
    kind: Literal["completed"]


class MaxTokensEnd(TypedDict):
    kind: Literal["max-tokens"]


class AbortedEnd(TypedDict):
    kind: Literal["aborted"]
    reason: CancelCause | None  # the signal's first reason, verbatim


class BlockedEnd(TypedDict):
    """A pre-step listener rejected the step."""

    kind: Literal["blocked"]


class ErrorEnd(TypedDict):
    kind: Literal["error"]
    error: ErrorData


class InterruptedEnd(TypedDict):
    """Written only by repair on load: the process stopped inside the turn (§5.6)."""

    kind: Literal["interrupted"]


TurnEnd = CompletedEnd | MaxTokensEnd | AbortedEnd | BlockedEnd | ErrorEnd | InterruptedEnd
