"""Durable epochs and notice identity (SPEC §8.3, §9; issue 9 items 3–4): facts a later process can
read back from the logs alone.

An epoch is one residency that accepts work. Its start is durable: the manager appends
`subagent/epoch {epoch}` (ignorable, so older readers skip it) to the child's log when a residency
for new work begins, numbering from 1 per child. A residency that recovers an epoch a crash cut off
appends nothing: it *continues* that epoch, so the epoch still owes exactly one notice.

The notice of epoch `k` of child `c` has the message id `notice_id(c, k)`, a uuid5 of the pair. The
parent's log is the record of delivery: an epoch that accepted work is settled-and-heard iff some
insert splice (or entered `user/message`) in the parent's log carries that id. Before sending, the
sender checks the parent's log for it, so a notice is never inserted twice across any number of
crash/resume cycles; the inbox's DUPLICATE_MESSAGE is the last guard.
"""

from __future__ import annotations

import hashlib
import uuid
import weakref
from dataclasses import dataclass
from typing import Any

from dsh.loader.session import Event, Session

__all__ = [
    "CONTINUE_FORM",
    "EPOCH_EVENT",
    "EpochFacts",
    "epochs_of",
    "holds_message",
    "latest_epoch",
    "session_holds_message",
    "next_epoch",
    "notice_id",
]

EPOCH_EVENT = "subagent/epoch"
CONTINUE_FORM = "resume"  # source form of the runtime's continuation message (see recovery.py)

_NOTICE_NAMESPACE = uuid.UUID("6f1d3c52-7a0e-4d8b-9a57-3c2b1e0d9f44")
_NAMESPACE_BYTES = _NOTICE_NAMESPACE.bytes


def notice_id(child_id: str, epoch: int) -> str:
    """The one message id the notice of (child, epoch) may ever have: `uuid5(namespace, "c/k")`,
    computed as `uuid.uuid5` does (SHA-1, version 5, RFC 4122 variant) without the `UUID` object
    (issue 13: a third of the cost; `test_notice_id_is_the_uuid5_of_child_and_epoch`)."""
    digest = bytearray(hashlib.sha1(_NAMESPACE_BYTES + f"{child_id}/{epoch}".encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


@dataclass(frozen=True)
class EpochFacts:
    epoch: int
    start: int  # index of the marker in the child's events: the epoch's terminal facts start here
    accepted: bool  # some message was inserted into the child's inbox during the epoch


def epochs_of(events: list[Event]) -> list[EpochFacts]:
    out: list[EpochFacts] = []
    current: tuple[int, int] | None = None
    accepted = False
    for i, event in enumerate(events):
        if event["type"] == EPOCH_EVENT:
            if current is not None:
                out.append(EpochFacts(current[0], current[1], accepted))
            number = event["data"].get("epoch")
            current = (number if isinstance(number, int) else len(out) + 1, i)
            accepted = False
        elif event["type"] == "agent/inbox/spliced" and event["data"].get("inserted"):
            accepted = True
    if current is not None:
        out.append(EpochFacts(current[0], current[1], accepted))
    return out


def latest_epoch(events: list[Event]) -> EpochFacts | None:
    found = epochs_of(events)
    return found[-1] if found else None


def next_epoch(events: list[Event]) -> int:
    latest = latest_epoch(events)
    return 1 if latest is None else latest.epoch + 1


def holds_message(events: list[Event], message_id: str) -> bool:
    """Was a message with this id ever inserted into (or entered from) this log's inbox?"""
    return message_id in _message_ids(events, 0, set())


def _message_ids(events: list[Event], start: int, ids: set[str]) -> set[str]:
    for i in range(start, len(events)):
        event = events[i]
        kind, data = event["type"], event["data"]
        if kind == "agent/inbox/spliced":
            ids.update(m["id"] for m in data.get("inserted", ()) if isinstance(m, dict) and isinstance(m.get("id"), str))
        elif kind == "user/message" and isinstance(data.get("id"), str):
            ids.add(data["id"])
    return ids


class _MessageIndex:
    """The ids `holds_message` looks for in one live log, and how many events they cover."""

    __slots__ = ("ids", "scanned")

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.scanned = 0


_INDEXES: weakref.WeakKeyDictionary[Session, _MessageIndex] = weakref.WeakKeyDictionary()


def session_holds_message(session: Session, message_id: str) -> bool:
    """`holds_message(session.events, id)`, kept incrementally per live session (issue 13: a
    1,000-child fan-out rescanned the parent's whole log once per notice, O(N²)). Sound because a
    session log only ever grows (`Session` invariant: appends never rewrite an event)."""
    index = _INDEXES.get(session)
    if index is None:
        index = _INDEXES[session] = _MessageIndex()
    events = session.events
    if index.scanned < len(events):
        _message_ids(events, index.scanned, index.ids)
        index.scanned = len(events)
    return message_id in index.ids
