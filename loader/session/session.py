"""The in-memory session log (SPEC §5.1–§5.3, §4.1 re-entrancy).

A `Session` is an append-only list of events plus synchronous observers. It knows nothing about
files: a store hands it a `sink` that receives each event before it is published.

Invariants:
- `all(e["seq"] == i for i, e in enumerate(session.events))`; appends never rewrite an event.
- `append` is one sync span: snapshot → sink → list append → notify. If the snapshot or the sink
  raises, `events` is unchanged (the sink is the store's enqueue, so a refused event is never
  published without being queued for the file).
- While observers run, `append` raises `ReentrantAppend`: observers see a stable log and never
  append (§4.1). Observer failures are logged, never propagated to the appender.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from dsh.loader.errors import ReentrantAppend, SessionError
from dsh.loader.session._codec import _MARKERS, _c_encode, _decode, _decode_object, _encode, _encode_other, _scan
from dsh.loader.session.envelope import EVENT_TYPES, Event, encode_line
from dsh.loader.texts import render

__all__ = ["LineSink", "Observer", "Session", "Sink", "snapshot"]

logger = logging.getLogger(__name__)

Sink = Callable[[Event], None]
LineSink = Callable[[Event, bytes], None]
"""A sink that also receives the event's encoded line (`encode_line(event)`, computed once)."""
Observer = Callable[[Event], Any]
"""Called with each published event; a returned awaitable is scheduled as a task (§4.1)."""


_M = TypeVar("_M", bound=Mapping[str, Any])

_time_ns = time.time_ns  # the default clock: wall-clock ms as `_time_ns() // 1_000_000`


def _snapshot(data: Any, copy: bool = True) -> tuple[dict[str, Any], str]:
    """The data's JSON text (the form `encode_line` writes) and a deep copy decoded from it, or
    `data` itself when not `copy` (`Session.append_owned`)."""
    if not isinstance(data, dict):
        raise SessionError("INVALID_EVENT", render("R-EVENT-NOT-OBJECT", kind=type(data).__name__))
    try:
        text = _encode(data)
    except (TypeError, ValueError) as exc:
        raise SessionError("INVALID_EVENT", render("R-EVENT-NOT-JSON", error=exc)) from exc
    if not copy:
        return data, text
    copied = _decode_object(text)
    if not isinstance(copied, dict):  # pragma: no cover - a dict always round-trips to a dict
        raise SessionError("INVALID_EVENT", render("R-EVENT-NOT-OBJECT", kind=type(copied).__name__))
    return copied, text


def _not_json(exc: BaseException) -> None:
    """An inline encoding failed (off the hot path): reset the encoder's circular-marker table and
    raise `INVALID_EVENT` for data that is not JSON; any other failure the caller re-raises."""
    _MARKERS.clear()
    if isinstance(exc, (TypeError, ValueError)):
        raise SessionError("INVALID_EVENT", render("R-EVENT-NOT-JSON", error=exc)) from exc


def snapshot(data: _M) -> tuple[_M, str]:
    """What `Session.append` makes of `data` before appending it: a copy decoded from its JSON text,
    and that text, with `append`'s errors (`INVALID_EVENT`). For a value one event holds inside its
    data and a later event holds whole (the inbox's message: its splice, then its `user/message`),
    so the text is made once (`Inbox.entry_text`)."""
    if _c_encode is None or data.__class__ is not dict:
        return cast("tuple[_M, str]", _snapshot(data, True))  # a dict of the same shape
    try:  # `_snapshot` inline, as in `Session._append`
        text = "".join(_c_encode(data, 0))
    except BaseException as exc:
        _not_json(exc)
        raise
    copied: _M = _scan(text, 0)[0]  # the same shape: a dict decoded from the dict's text
    return copied, text


_MESSAGE_TYPES = frozenset({"user/message", "assistant/message", "tool/result"})  # what §5.3 derives from

_TYPE_TEXT: dict[str, str] = {}  # event type -> its JSON text; the types are a small fixed set


def _line(type: str, seq: int, time: int, data_text: str, ignorable: bool) -> bytes:
    """`encode_line(event)` from the data's text, without encoding the data again (issue 13)."""
    tail = ',"ignorable":true}' if ignorable else "}"
    type_text = _TYPE_TEXT.get(type)
    if type_text is None:
        type_text = _encode_other(type)
        if len(_TYPE_TEXT) < 256:  # ignorable types are open-ended: bound the cache
            _TYPE_TEXT[type] = type_text
    text = f'{{"type":{type_text},"seq":{seq},"time":{time},"data":{data_text}{tail}'
    try:
        return text.encode("utf-8") + b"\n"
    except UnicodeEncodeError:  # lone surrogates: the escaped form, as `encode_line` writes it
        return encode_line({"type": type, "seq": seq, "time": time, "data": _decode(data_text),
                            **({"ignorable": True} if ignorable else {})})


class Session:
    def __init__(
        self,
        header: dict[str, Any],
        events: list[Event] | None = None,
        *,
        sink: Sink | None = None,
        line_sink: LineSink | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self.header = header
        self.id: str = header["id"]
        self.events: list[Event] = list(events) if events is not None else []
        self.closed = False
        self._sink = sink
        self._line_sink = line_sink
        self._clock = clock  # None: wall-clock ms, read inline in `_append`
        self._observers: list[Observer] = []
        # Invariant: _publishing is True exactly while observers of one append are being called.
        self._publishing = False
        self._tasks: set[asyncio.Task[Any]] = set()
        # Invariant: _messages == derive_messages() of events[:_derived] (the incremental walk).
        self._messages: list[dict[str, Any]] = []
        self._derived = 0

    def __repr__(self) -> str:
        return f"Session({self.id!r}, events={len(self.events)}, closed={self.closed})"

    def append(self, type: str, data: Mapping[str, Any], *, ignorable: bool = False) -> Event:
        """Append one event and publish it; a plain `def` so the whole append is one sync span.

        The log keeps a copy of `data` decoded from its JSON text, so the event in memory is what a
        reload gives (tuples become lists, non-str keys strings) and the caller's data may change.
        """
        return self._append(type, data, ignorable, True)

    def append_owned(self, type: str, data: dict[str, Any], *, ignorable: bool = False) -> Event:
        """`append` for data the runtime built for this call (issue 13): the log keeps `data` itself.

        Only for a fresh dict whose keys are `str` and whose values are JSON-native (`str`, `int`,
        `bool`, `None`, finite `float`, and lists and dicts of these) that nobody holds or changes
        afterwards: then the decoded copy would equal `data`, and skipping it is the saving. Data
        from outside (messages, tool results, provider output, transcripts) goes through `append`.
        """
        return self._append(type, data, ignorable, False)

    def append_encoded(self, type: str, data: Mapping[str, Any], text: str, *, ignorable: bool = False) -> Event:
        """`append_owned` with `text` the caller's `_encode(data)`, made once (issue 13): for many
        sessions (every child of a fan-out encoded the same `llm/tools` and `llm/system` data, half
        of a 1,000-child run's log bytes), formatted for a fixed shape (`shaped.py`: six of a model
        call's nine events), or reused from an earlier event holding the same value (`snapshot`:
        the inbox's message, then its `user/message`). Only for data that is never changed once its
        text is made (read-only, as all log data); the line written is the one `append` would
        write, which `test_append_encoded_writes_what_append_writes` and `test_shaped.py` pin.

        Every append ends here: one frame per event (issue 13: the clock, line, sink and publish
        helpers were ~6 frames of ~9 per event, 9 events per model call)."""
        if self.closed or self._publishing or type.__class__ is not str or type not in EVENT_TYPES:
            self._refuse(type, ignorable)  # raises, unless the type is only ignorable or a str subclass
        seq = len(self.events)
        clock = self._clock
        now = _time_ns() // 1_000_000 if clock is None else clock()
        event: Event = {"type": type, "seq": seq, "time": now, "data": data}
        if ignorable:
            event["ignorable"] = True
        line_sink = self._line_sink
        if line_sink is not None:  # may raise: then nothing is appended or published
            type_text = _TYPE_TEXT.get(type)
            line: bytes | None = None
            if type_text is not None:
                tail = ',"ignorable":true}\n' if ignorable else "}\n"
                try:
                    line = f'{{"type":{type_text},"seq":{seq},"time":{now},"data":{text}{tail}'.encode()
                except UnicodeEncodeError:  # lone surrogates: `_line` writes the escaped form
                    line = None
            line_sink(event, line if line is not None else _line(type, seq, now, text, ignorable))
        if self._sink is not None:
            self._sink(event)  # may raise: then nothing is appended or published
        self.events.append(event)
        if self._observers:
            self._publish(event)
        return event

    def _append(self, type: str, data: Any, ignorable: bool, copy: bool) -> Event:
        """`append` (`copy`) and `append_owned`: the text and, if `copy`, the copy decoded from it
        (`_snapshot`, inline), then `append_encoded`. Refusals come before the encoding, as they
        would without it."""
        if self.closed or self._publishing or type.__class__ is not str or type not in EVENT_TYPES:
            self._refuse(type, ignorable)
        if _c_encode is not None and data.__class__ is dict:
            try:
                text = "".join(_c_encode(data, 0))
            except BaseException as exc:
                _not_json(exc)
                raise
            # A dict's text always decodes to a dict (`_snapshot` checks it for other mappings).
            copied = _scan(text, 0)[0] if copy else data
        else:
            copied, text = _snapshot(data, copy)
        return self.append_encoded(type, copied, text, ignorable=ignorable)

    def _refuse(self, type: Any, ignorable: bool) -> None:
        """Raise what appending an event of `type` must raise now, if anything."""
        if self.closed:
            raise SessionError("SESSION_CLOSED", render("R-SESSION-CLOSED", id=self.id))
        if self._publishing:
            raise ReentrantAppend(self.id)
        if not isinstance(type, str) or not type:
            raise SessionError("INVALID_EVENT", render("R-EVENT-BAD-TYPE", type=type))
        if type not in EVENT_TYPES and not ignorable:
            # Load refuses unknown non-ignorable types (§5.1); refusing here keeps the log loadable.
            raise SessionError("INVALID_EVENT", render("R-EVENT-UNKNOWN-TYPE", type=type))

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call `observer(event)` after each append, in registration order. Returns an unsubscribe."""
        self._observers.append(observer)

        def unsubscribe() -> None:
            if observer in self._observers:
                self._observers.remove(observer)

        return unsubscribe

    def derive_messages(self) -> list[dict[str, Any]]:
        """The model-visible request messages (§5.3). The dicts are the log's own: treat as read-only.

        Kept incrementally (issue 13: walking the whole log per model call made a conversation's
        cost quadratic): only events appended since the last call are walked; sound because the
        log only grows. The list returned is a fresh copy, so callers may extend it.
        """
        return list(self.derived_messages())

    def derived_messages(self) -> list[dict[str, Any]]:
        """`derive_messages` without the copy (issue 13: a copy per model call grows with history):
        the session's own list, caught up. Never change it; it only grows, so `[:n]` of it is the
        list of the moment it had `n` items."""
        events, messages = self.events, self._messages
        for i in range(self._derived, len(events)):
            event = events[i]
            kind = event["type"]
            if kind not in _MESSAGE_TYPES:  # most events (issue 13: 7 of a model call's 9)
                continue
            data = event["data"]
            if kind == "user/message":
                messages.append(data)
            elif kind == "assistant/message":
                message = data.get("message")
                if isinstance(message, dict) and message.get("content"):
                    messages.append(message)
            elif kind == "tool/result":
                message = data.get("message")
                if isinstance(message, dict):
                    messages.append(message)
        self._derived = len(events)
        return messages

    def _publish(self, event: Event) -> None:
        self._publishing = True
        try:
            for observer in list(self._observers):
                try:
                    result = observer(event)
                except Exception:
                    logger.exception("session %s: observer failed on seq %d", self.id, event["seq"])
                    continue
                if result is not None and inspect.isawaitable(result):  # most observers return None
                    self._schedule(result, event)
        finally:
            self._publishing = False

    def _schedule(self, awaitable: Any, event: Event) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # No running loop: the awaitable can never run; close it so it does not warn.
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            logger.error("session %s: async observer on seq %d has no loop", self.id, event["seq"])
            return
        task = asyncio.ensure_future(awaitable, loop=loop)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("session %s: async observer failed", self.id, exc_info=task.exception())
