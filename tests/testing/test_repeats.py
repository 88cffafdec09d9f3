"""`check_repeats` skips the YAML dump of a run whose data has run 1's `repr` (the dump is most of
a small run's cost); these pin that the shortcut never hides a difference the dump would show."""

from __future__ import annotations

from typing import Any

import pytest

from dsh.loader.testing import Flow, FlowsDiffer, check_repeats


def _flow(value: Any) -> Flow:
    return Flow({"transcript": "t", "sessions": [{"id": "S1", "turns": [{"value": value}]}]})


@pytest.mark.parametrize("other", [1.0, True, "1", [1], {"1": 1}])
def test_runs_equal_under_python_equality_but_not_in_yaml_differ(other: Any) -> None:
    # 1 == 1.0 == True in Python; the stored flow says 1, 1.0 and true.
    with pytest.raises(FlowsDiffer) as caught:
        check_repeats("t", [_flow(1), _flow(1), _flow(other)])
    assert (caught.value.first, caught.value.second, caught.value.distinct) == (1, 3, 2)
    assert "-  - value: 1\n" in caught.value.diff


def test_key_order_is_a_difference_as_in_the_stored_yaml() -> None:
    a = Flow({"transcript": "t", "x": 1, "y": 2})
    b = Flow({"transcript": "t", "y": 2, "x": 1})
    assert a == b  # dict equality ignores order; the snapshot's bytes do not
    with pytest.raises(FlowsDiffer):
        check_repeats("t", [a, b])


def test_runs_whose_data_only_looks_different_pass_as_one_flow() -> None:
    # A tuple and a list dump to the same YAML: repr differs, so the texts decide.
    flows = [_flow([1, 2]), _flow((1, 2)), _flow([1, 2])]
    assert check_repeats("t", flows) is flows[0]


def test_equal_runs_return_the_first_flow() -> None:
    flows = [_flow({"a": [1, "x"]}) for _ in range(5)]
    assert check_repeats("t", flows) is flows[0]
