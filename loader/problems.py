"""Problem lines of a configuration or transcript file (SPEC §22, issue 11 item 5): in position
order, and an unknown key with the valid key it most resembles.

`in_position_order` sorts `<file>:<line>:<col>: …` lines by file, then line and column as numbers
(a plain string sort puts line 10 before line 9); lines without a position (`environment DSH_…`,
`flag --model`) keep their order after the located ones. `did_you_mean` runs difflib over the
keys the schema accepts at the unknown key's place, which it finds by walking the pydantic model
along the error's `loc` (through Optional, lists, dicts and unions).
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from dsh.loader.texts import render

__all__ = ["did_you_mean", "in_position_order", "unknown_key_problem", "valid_keys_at"]

_POSITION = re.compile(r"^(?P<file>.+?):(?P<line>\d+):(?P<col>\d+): ")


def in_position_order(lines: Iterable[str]) -> list[str]:
    """Located lines first, by (file, line, col); the rest after them in their own order."""
    indexed = list(enumerate(lines))

    def key(item: tuple[int, str]) -> tuple[int, str, int, int, int]:
        index, text = item
        found = _POSITION.match(text)
        if found is None:
            return (1, "", 0, 0, index)
        return (0, found["file"], int(found["line"]), int(found["col"]), index)

    return [text for _, text in sorted(indexed, key=key)]


def did_you_mean(key: str, valid: Sequence[str]) -> str | None:
    """The valid key closest to `key` (case-insensitive difflib), or None when none is close."""
    by_folded = {v.casefold(): v for v in valid}
    close = difflib.get_close_matches(key.casefold(), list(by_folded), n=1, cutoff=0.6)
    return by_folded[close[0]] if close else None


def unknown_key_problem(model: Any, loc: Sequence[str | int]) -> str:
    """`unknown key`, with `; did you mean X?` when the schema has a close key at `loc`'s parent."""
    suggestion = None
    if loc and isinstance(loc[-1], str):
        suggestion = did_you_mean(loc[-1], valid_keys_at(model, loc[:-1]))
    return render("T-CONFIG-DID-YOU-MEAN", suggestion=suggestion) if suggestion else "unknown key"


def valid_keys_at(model: Any, loc: Sequence[str | int]) -> list[str]:
    """The YAML (alias) keys the model reached by `loc` accepts; [] when `loc` leaves the schema."""
    candidates = _models(model)
    for part in loc:
        nxt: list[Any] = []
        for current in candidates:
            nxt.extend(_step(current, part))
        if not nxt:
            return []
        candidates = nxt
    keys: list[str] = []
    for current in candidates:
        for name, field in getattr(current, "model_fields", {}).items():
            alias = field.alias or name
            if alias not in keys:
                keys.append(alias)
    return keys


def _step(annotation: Any, part: str | int) -> list[Any]:
    """Where `part` of a pydantic `loc` leads from `annotation` (a model class or a container type)."""
    fields = getattr(annotation, "model_fields", None)
    if fields is not None:
        if not isinstance(part, str):
            return []
        for name, field in fields.items():
            if part in (name, field.alias):
                return _models(field.annotation)
        return []
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset, Sequence) and args:
        return _models(args[0]) if isinstance(part, int) else []
    if origin is dict and len(args) == 2:
        return _models(args[1])
    # A union member named by pydantic's tag (`TextReply`, `function-after[…]`): the members' own.
    return []


def _models(annotation: Any) -> list[Any]:
    """`annotation` unwrapped: Annotated, Optional and unions become their members."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        out: list[Any] = []
        for member in typing.get_args(annotation):
            if member is not type(None):
                out.extend(_models(member))
        return out
    return [annotation]
