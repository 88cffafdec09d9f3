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
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from dsh.loader.errors import ReentrantAppend, SessionError
from dsh.loader.session.envelope import EVENT_TYPES, Event, encode_line
from dsh.loader.texts import render

__all__ = ["LineSink", "Observer", "Session", "Sink"]

logger = logging.getLogger(__name__)

Sink = Callable[[Event], None]
LineSink = Callable[[Event, bytes], None]
"""A sink that also receives the event's encoded line (`encode_line(event)`, computed once)."""
Observer = Callable[[Event], Any]
"""Called with each published event; a returned awaitable is scheduled as a task (§4.1)."""


_time_ns = time.time_ns  # the default clock: wall-clock ms as `_time_ns() // 1_000_000`


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_encode_other = _ENCODER.encode  # any value (the event type's text); dicts take `_encode`
_decode = json.JSONDecoder().decode
_scan: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009 - untyped in typeshed
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
# One C encoder reused for every event (issue 13): `JSONEncoder.encode` builds a new one, and a
# closure, per call, which cost as much as the encoding of a small event itself. Same text, same
# errors (the C path is the one `encode` takes); the circular-reference markers are emptied after a
# failed encode, since the C encoder leaves them behind when it raises.
_MARKERS: dict[int, Any] = {}
_c_encode: Any = None if _c_make_encoder is None else _c_make_encoder(
    _MARKERS, _ENCODER.default, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def _encode(data: dict[str, Any]) -> str:
    if _c_encode is None:  # pragma: no cover - CPython ships the C encoder
        return _encode_other(data)
    try:
        return "".join(_c_encode(data, 0))
    except BaseException:
        _MARKERS.clear()
        raise


def _decode_object(text: str) -> Any:
    """`_decode` for a text `_encode` made (no surrounding whitespace): the C scanner, without
    `decode`'s two whitespace matches and frames."""
    return _scan(text, 0)[0]


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

    def _append(self, type: str, data: Mapping[str, Any], ignorable: bool, copy: bool) -> Event:
        # One frame per event (issue 13: the snapshot, clock, line and publish helpers were ~6 frames
        # of ~9 per event, 9 events per model call); the helpers above stay the reference forms.
        if self.closed:
            raise SessionError("SESSION_CLOSED", render("R-SESSION-CLOSED", id=self.id))
        if self._publishing:
            raise ReentrantAppend(self.id)
        if not isinstance(type, str) or not type:
            raise SessionError("INVALID_EVENT", render("R-EVENT-BAD-TYPE", type=type))
        if type not in EVENT_TYPES and not ignorable:
            # Load refuses unknown non-ignorable types (§5.1); refusing here keeps the log loadable.
            raise SessionError("INVALID_EVENT", render("R-EVENT-UNKNOWN-TYPE", type=type))
        if _c_encode is not None and data.__class__ is dict:  # `_snapshot`, inline (`type` is the event type here)
            try:
                text = "".join(_c_encode(data, 0))
            except BaseException as exc:
                _MARKERS.clear()
                if isinstance(exc, (TypeError, ValueError)):
                    raise SessionError("INVALID_EVENT", render("R-EVENT-NOT-JSON", error=exc)) from exc
                raise
            # A dict's text always decodes to a dict (`_snapshot` checks it for other mappings).
            copied: dict[str, Any] = _scan(text, 0)[0] if copy else data
        else:
            copied, text = _snapshot(data, copy)
        seq = len(self.events)
        clock = self._clock
        now = _time_ns() // 1_000_000 if clock is None else clock()
        event: Event = {"type": type, "seq": seq, "time": now, "data": copied}
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
            kind, data = event["type"], event["data"]
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
