"""`loads_bounded` (loader/boundedjson.py): the same refusals on its fast path (a small text without
`\\u` escapes, issue 15 item 8) as on the full walk of the value."""

from __future__ import annotations

import pytest

from dsh.loader.boundedjson import MAX_DEPTH, JsonProblem, loads_bounded


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"a": "x\ud800"}', id="raw-lone-surrogate-fast-path"),
        pytest.param('{"a": "x\\ud800"}', id="escaped-lone-surrogate"),
        pytest.param('{"\udfff": 1}', id="raw-lone-surrogate-in-a-key"),
        pytest.param("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), id="one-level-too-deep"),
        pytest.param("\ufeff{}", id="byte-order-mark"),
        pytest.param("1" * 65, id="65-digit-integer"),
        pytest.param('{"a": NaN}', id="nan"),
    ],
)
def test_refused(text: str) -> None:
    with pytest.raises(JsonProblem):
        loads_bounded(text)


def test_the_deepest_allowed_value_and_brackets_inside_strings_are_accepted() -> None:
    expected: list[object] = []
    for _ in range(MAX_DEPTH - 1):
        expected = [expected]
    assert loads_bounded("[" * MAX_DEPTH + "]" * MAX_DEPTH) == expected
    many = "[" * (MAX_DEPTH + 10)
    assert loads_bounded(f'{{"a": "{many}"}}') == {"a": many}  # counted, walked, depth 1


def test_the_fast_path_decodes_like_json() -> None:
    line = '{"jsonrpc":"2.0","id":7,"method":"run.status","params":{"x":[1,2.5,true,null,"é"]}}'
    assert loads_bounded(line) == {"jsonrpc": "2.0", "id": 7, "method": "run.status",
                                   "params": {"x": [1, 2.5, True, None, "é"]}}
