"""The turn-end vocabulary (SPEC §6.10) is one closed union; the validator's set is derived from it."""

from __future__ import annotations

from typing import get_args, get_type_hints

import pytest

from dsh.loader.errors import SessionError
from dsh.loader.session import TurnEnd, TurnEndKind, validate_log
from dsh.loader.session.envelope import TURN_END_KINDS


def test_each_turn_end_typeddict_names_one_kind_and_together_they_are_the_closed_set():
    kinds = [get_args(get_type_hints(td)["kind"]) for td in get_args(TurnEnd)]
    assert all(len(k) == 1 for k in kinds)
    assert sorted(k for (k,) in kinds) == sorted(get_args(TurnEndKind)) == sorted(TURN_END_KINDS)


def test_a_turn_end_kind_outside_the_union_fails_validation():
    start = {"type": "turn/start", "seq": 0, "time": 0, "data": {"turn": 1}}

    def end(kind: str) -> dict[str, object]:
        return {"type": "turn/end", "seq": 1, "time": 0, "data": {"turn": 1, "reason": {"kind": kind}}}

    for kind in TURN_END_KINDS:
        validate_log([start, end(kind)])
    with pytest.raises(SessionError) as err:
        validate_log([start, end("finished")])
    assert err.value.code == "INVALID_LOG"
