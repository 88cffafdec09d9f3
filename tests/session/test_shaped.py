"""The fixed-shape event texts (`loader.session.shaped`, issue 13) are exactly what the encoder writes.

`Session.append_encoded` writes the text it is given: a text that differs from `_encode(data)` by one
byte would make the log differ from what `append` writes, or not reload as the data in memory. So
each formatter is compared with the encoder over arbitrary ints (huge and negative included) and
strings (lone surrogates and control characters included), and for arguments that are not exact
`int`/`str` (a `bool`, an `IntEnum`, a `str` subclass), which must take the encoder.
"""

from __future__ import annotations

import enum
import json

from hypothesis import given
from hypothesis import strategies as st

from dsh.loader.session import insertion_text, removal_text, step_text, turn_end_text, turn_text
from dsh.loader.session._codec import _encode

ints = st.one_of(st.integers(), st.booleans(), st.sampled_from([enum.IntEnum("E", "A B").B]))
texts = st.one_of(st.text(st.characters(blacklist_categories=())), st.just("next-turn"),
                  st.builds(type("Sub", (str,), {}), st.text()))


@given(ints, ints)
def test_turn_and_step_texts_are_the_encoders(turn: int, step: int) -> None:
    assert turn_text(turn) == _encode({"turn": turn})
    assert step_text(turn, step) == _encode({"turn": turn, "step": step})


@given(ints, texts)
def test_a_turn_end_text_is_the_encoders(turn: int, kind: str) -> None:
    assert turn_end_text(turn, kind) == _encode({"turn": turn, "reason": {"kind": kind}})


@given(texts, ints, ints, st.booleans())
def test_a_removal_text_is_the_encoders(target: str, start: int, count: int, canceled: bool) -> None:
    data = {"target": target, "start": start, "inserted": [], "removedCount": count}
    if canceled:
        data["outcome"] = "canceled"
    assert removal_text(target, start, count, canceled) == _encode(data)


@given(texts, ints, st.dictionaries(texts, st.one_of(ints, texts, st.none())))
def test_an_insertion_text_is_the_encoders(target: str, start: int, message: dict[str, object]) -> None:
    text = _encode(message)
    assert insertion_text(target, start, text) == _encode({"target": target, "start": start, "inserted": [message]})
    assert json.loads(insertion_text(target, start, text))["inserted"] == [json.loads(text)]
