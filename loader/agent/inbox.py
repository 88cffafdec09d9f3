"""The inbox (SPEC §6.5): two FIFO lists of pending user-role messages, `next-turn` and `next-step`.

Every mutation is exactly one durable `agent/inbox/spliced` event, in sync span S3:
validate → append the event → mutate the lists → notify. Observers of the session append
therefore see the pre-splice lists, and inbox listeners (notified after publication) may send or
cancel. The lists are rebuilt from the log's splices at construction, so a resumed agent finds
exactly what was pending when its process stopped, plus what crash repair re-queued (a message
claimed in the crash-open turn but never entered into a step; `loader.session.repair`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypedDict, cast

from dsh.loader.emitter import Emitter
from dsh.loader.errors import InboxError
from dsh.loader.session import Event, Session, insertion_text, removal_text, replay_inbox, snapshot
from dsh.loader.texts import render

__all__ = ["Inbox", "Message", "Target"]

Target = Literal["next-turn", "next-step"]


class Message(TypedDict):
    """A pending user-role message (§5.3), stored verbatim in `agent/inbox/spliced.inserted`.

    `id` is unique among everything an inbox holds; `source` says who sent it (`{"kind": "user"}`,
    a subagent notice, a tool result, …) and is what fences and notices branch on.
    """

    id: str
    role: Literal["user"]
    content: list[dict[str, Any]]
    source: dict[str, Any]


TARGETS: tuple[Target, Target] = ("next-turn", "next-step")


class Inbox:
    def __init__(self, session: Session, emitter: Emitter | None = None) -> None:
        self._session = session
        self._events = emitter or Emitter()
        self.lists: dict[str, list[Message]] = {"next-turn": [], "next-step": []}
        # Invariant: _ids == {m["id"] for items in lists.values() for m in items} (issue 13: the
        # duplicate check of every append scanned both lists, O(N²) for a parent of N children).
        self._ids: set[str] = set()
        # Invariant: _texts[id] == (m, _encode(m)) for pending messages m this object inserted (not
        # rebuilt ones); `claim` moves the claimed ones to _claimed_texts, replacing the last claim's
        # (issue 13: the step that enters a message reuses its splice's text, `entry_text`).
        self._texts: dict[str, tuple[Message, str]] = {}
        self._claimed_texts: dict[str, tuple[Message, str]] = {}
        self._rebuild(session.events)

    # -- reading ---------------------------------------------------------------------------
    @property
    def next_turn(self) -> list[Message]:
        return self.lists["next-turn"]

    @property
    def next_step(self) -> list[Message]:
        return self.lists["next-step"]

    @property
    def has_pending(self) -> bool:
        lists = self.lists
        return bool(lists["next-turn"] or lists["next-step"])

    def find(self, message_id: str) -> tuple[Target, int] | None:
        if message_id not in self._ids:
            return None
        for target in TARGETS:
            for i, m in enumerate(self.lists[target]):
                if m["id"] == message_id:
                    return target, i
        return None

    # -- mutations (each one sync span S3) --------------------------------------------------
    def append(self, target: Target, message: Message) -> None:
        if target not in TARGETS:
            raise InboxError("INVALID_SPLICE", render("R-INBOX-TARGET", target=target))
        if message["id"] in self._ids:
            raise InboxError("DUPLICATE_MESSAGE", render("R-INBOX-DUPLICATE", id=message["id"]))
        items = self.lists[target]
        start = len(items)
        if message.__class__ is not dict:  # a Mapping that is not a dict: `append`'s own checks and copy
            self._session.append("agent/inbox/spliced", {"target": target, "start": start, "inserted": [message]})
            stored: Message = self._session.events[-1]["data"]["inserted"][0]
        else:  # the message's copy and text, made once: the splice holds them, the entering step reuses them
            stored, text = snapshot(message)
            self._session.append_encoded(
                "agent/inbox/spliced", {"target": target, "start": start, "inserted": [stored]},
                insertion_text(target, start, text),
            )
            self._texts[stored["id"]] = (stored, text)
        items.append(stored)
        self._ids.add(stored["id"])
        self._events.emit("agent/inbox/inserted", {"message": stored, "target": target})

    def remove(self, message_id: str) -> bool:
        found = self.find(message_id)
        if found is None:
            return False
        target, index = found
        self._discard(target, index, 1)
        return True

    def clear(self) -> None:
        """Discard pending work, except settlement notices (issue 9 item 4): a notice is the only
        record that a child's epoch ended, so a cancel or a disposal leaves it pending in the log for
        the agent's next residency instead of dropping it unread."""
        for target in ("next-step", "next-turn"):
            items = self.lists[target]
            index = 0
            while index < len(items):
                if _is_notice(items[index]):
                    index += 1
                    continue
                end = index
                while end < len(items) and not _is_notice(items[end]):
                    end += 1
                self._discard(target, index, end - index)

    def claim(self, target: Target, turn: int) -> list[Message]:
        """Remove the step's batch: all of next-step, then (for a turn boundary) one next-turn item."""
        claimed: list[Message] = []
        lists = self.lists
        if lists["next-step"]:
            claimed.extend(self._remove("next-step", 0, len(lists["next-step"]), canceled=False))
        if target == "next-turn" and lists["next-turn"]:
            claimed.extend(self._remove("next-turn", 0, 1, canceled=False))
        texts, claimed_texts = self._texts, {}
        for m in claimed:
            entry = texts.pop(m["id"], None)
            if entry is not None:
                claimed_texts[m["id"]] = entry
        self._claimed_texts = claimed_texts
        for m in claimed:
            self._events.emit("agent/inbox/claimed", {"message": m, "turn": turn})
        return claimed

    def entry_text(self, message: Message) -> str | None:
        """The JSON text of `message` as its splice wrote it, if the latest `claim` returned this very
        object: the step that enters it appends it with that text (`Session.append_encoded`) instead
        of encoding and copying it again (issue 13). The message is the log's own copy, read-only
        like all log data, so the text still encodes it. Once per message; None otherwise."""
        entry = self._claimed_texts.get(message["id"])
        if entry is None or entry[0] is not message:
            return None
        del self._claimed_texts[message["id"]]
        return entry[1]

    def on(self, name: str, fn: Callable[[Any], Any]) -> Callable[[], None]:
        return self._events.on(name, fn)

    def _discard(self, target: Target, start: int, count: int) -> None:
        removed = self._remove(target, start, count, canceled=True)
        for m in removed:
            self._events.emit("agent/inbox/discarded", {"message": m, "target": target})

    def _remove(self, target: Target, start: int, count: int, *, canceled: bool) -> list[Message]:
        data: dict[str, Any] = {"target": target, "start": start, "inserted": [], "removedCount": count}
        if canceled:
            data["outcome"] = "canceled"
        self._session.append_encoded("agent/inbox/spliced", data, removal_text(target, start, count, canceled))
        items = self.lists[target]
        removed = items[start : start + count]
        del items[start : start + count]
        ids = self._ids
        for m in removed:
            ids.discard(m["id"])
            if canceled:
                self._texts.pop(m["id"], None)
        return removed

    # -- rebuild ----------------------------------------------------------------------------
    def _rebuild(self, events: list[Event]) -> None:
        # One replay for the inbox and crash repair (`loader.session.replay_inbox`), so both read the
        # same lists; it raises SESSION_CORRUPT on an invalid splice and accepts a repair's re-insert.
        for target, items in replay_inbox(events).items():
            self.lists[target] = cast("list[Message]", items)
        self._ids = {m["id"] for items in self.lists.values() for m in items}


def _is_notice(message: Message) -> bool:
    source = message.get("source")
    return isinstance(source, dict) and source.get("kind") == "subagent-settled"
