"""Session log and JSONL store (SPEC §5).

`Session` is the in-memory append-only log (§5.1–§5.3); `SessionStore` mirrors it to
`sessions/<id>/session.jsonl` with write-behind batching and flush barriers (§5.4, §5.5) and repairs
torn tails and interrupted turns on load (§5.6). Other packages import from here, never from the
modules below.
"""

from __future__ import annotations

from loader.session.envelope import EVENT_TYPES, Event, make_header, validate_log
from loader.session.repair import ReadResult, interrupted_turn_closers, read
from loader.session.session import Session
from loader.session.store import FileIO, SessionStore, StoreIO
from loader.session.turn_end import ErrorData, TurnEnd, TurnEndKind

__all__ = [
    "EVENT_TYPES",
    "ErrorData",
    "Event",
    "FileIO",
    "ReadResult",
    "Session",
    "SessionStore",
    "StoreIO",
    "TurnEnd",
    "TurnEndKind",
    "interrupted_turn_closers",
    "make_header",
    "read",
    "validate_log",
]
