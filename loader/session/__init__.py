"""Session log and JSONL store (SPEC §5).

`Session` is the in-memory append-only log (§5.1–§5.3); `SessionStore` mirrors it to
`sessions/<id>/session.jsonl` with write-behind batching and flush barriers (§5.4, §5.5) and repairs
torn tails and interrupted turns on load (§5.6), re-queueing what a crash-open turn claimed but never
entered. Creation is atomic; a directory a crash left without a header is "never materialized"
(`unmaterialized`), not corrupt. Other packages import from here, never from the
modules below.
"""

from __future__ import annotations

from dsh.loader.session._fileio import open_regular
from dsh.loader.session.envelope import EVENT_TYPES, Event, make_header, validate_log
from dsh.loader.session.repair import REQUEUED, ReadResult, interrupted_turn_closers, read, replay_inbox
from dsh.loader.session.prune import prune_tree
from dsh.loader.session.requests import LoggedRequest, RequestLog, logged_requests
from dsh.loader.session.session import Session, snapshot
from dsh.loader.session.shaped import insertion_text, removal_text, step_text, turn_end_text, turn_text
from dsh.loader.session.store import FileIO, SessionStore, StoreIO
from dsh.loader.session.turn_end import ErrorData, TurnEnd, TurnEndKind
from dsh.loader.session.unmaterialized import PruneOutcome, is_unmaterialized, prune_unmaterialized, unmaterialized_ids

__all__ = [
    "EVENT_TYPES",
    "ErrorData",
    "REQUEUED",
    "Event",
    "FileIO",
    "LoggedRequest",
    "PruneOutcome",
    "ReadResult",
    "RequestLog",
    "Session",
    "SessionStore",
    "StoreIO",
    "TurnEnd",
    "TurnEndKind",
    "insertion_text",
    "interrupted_turn_closers",
    "is_unmaterialized",
    "logged_requests",
    "make_header",
    "open_regular",
    "prune_tree",
    "prune_unmaterialized",
    "read",
    "removal_text",
    "replay_inbox",
    "snapshot",
    "step_text",
    "turn_end_text",
    "turn_text",
    "unmaterialized_ids",
    "validate_log",
]
