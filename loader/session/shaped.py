"""The JSON text of the runtime's fixed-shape event data, made without the encoder (issue 13).

Six of a replayed model call's nine events have data the runtime builds from a few ints and known
strings: `turn/start {turn}`, `step/start` / `step/end {turn, step}`, `turn/end {turn, reason: {kind}}`
for a reason that is only its kind, and the inbox's splices. The C encoder spends most of its time
on such small dicts building and joining one string per token (~0.7-1.2 µs each, against ~0.15 µs
for an f-string), so these texts are formatted directly and handed to `Session.append_encoded`
with the data they encode.

Each function returns exactly `_encode(data)` of the data it names (compact separators, no ASCII
escaping; a string through the encoder's own `encode_basestring`), which
`tests/session/test_shaped.py` pins over arbitrary ints and strings. An argument that is not an
exact `int` (a `bool`, an int subclass) or `str` takes the encoder, so the text is never one a
reload would read differently.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dsh.loader.session._codec import _encode

__all__ = ["encode_string", "insertion_text", "removal_text", "step_text", "turn_end_text", "turn_text"]

encode_string: Callable[[str], str] = json.encoder.encode_basestring
"""A `str`'s JSON text as `_encode` writes it inside data (the C function the encoder calls)."""


def turn_text(turn: int) -> str:
    """`_encode({"turn": turn})`."""
    if turn.__class__ is not int:
        return _encode({"turn": turn})
    return f'{{"turn":{turn}}}'


def step_text(turn: int, step: int) -> str:
    """`_encode({"turn": turn, "step": step})`."""
    if turn.__class__ is not int or step.__class__ is not int:
        return _encode({"turn": turn, "step": step})
    return f'{{"turn":{turn},"step":{step}}}'


def turn_end_text(turn: int, kind: str) -> str:
    """`_encode({"turn": turn, "reason": {"kind": kind}})`."""
    if turn.__class__ is not int or kind.__class__ is not str:
        return _encode({"turn": turn, "reason": {"kind": kind}})
    return f'{{"turn":{turn},"reason":{{"kind":{encode_string(kind)}}}}}'


def removal_text(target: str, start: int, count: int, canceled: bool) -> str:
    """`_encode` of a removing splice: `{target, start, inserted: [], removedCount}` and, when
    `canceled`, `outcome: "canceled"` after them."""
    if target.__class__ is not str or start.__class__ is not int or count.__class__ is not int:
        data: dict[str, Any] = {"target": target, "start": start, "inserted": [], "removedCount": count}
        if canceled:
            data["outcome"] = "canceled"
        return _encode(data)
    tail = ',"outcome":"canceled"}' if canceled else "}"
    return f'{{"target":{encode_string(target)},"start":{start},"inserted":[],"removedCount":{count}{tail}'


def insertion_text(target: str, start: int, message_text: str) -> str:
    """`_encode({"target": target, "start": start, "inserted": [message]})` with `message_text`
    the message's own `_encode` (made once: the step that enters the message reuses it)."""
    if target.__class__ is not str or start.__class__ is not int:
        return _encode({"target": target, "start": start, "inserted": [json.loads(message_text)]})
    return f'{{"target":{encode_string(target)},"start":{start},"inserted":[{message_text}]}}'
