"""Layer merging (SPEC §14.2 items 2 and 5), below `compose`; the environment's layers are
tested in test_environment.py."""

from __future__ import annotations

from dsh.loader.config import deep_merge
from dsh.loader.config import flag_layer
from dsh.loader.config._layers import Layer, Merged


def test_m98_mappings_merge_and_lists_replace() -> None:
    """Matrix 98 (merge half): the schema has no lists, so the merge rule is pinned here."""
    base = {"a": {"x": 1, "y": [1, 2, 3]}, "b": "keep"}
    over = {"a": {"y": [9], "z": {"deep": True}}}
    assert deep_merge(base, over) == {"a": {"x": 1, "y": [9], "z": {"deep": True}}, "b": "keep"}
    assert base == {"a": {"x": 1, "y": [1, 2, 3]}, "b": "keep"}  # inputs untouched


def test_explicit_null_replaces_a_mapping() -> None:
    assert deep_merge({"a": {"x": 1}}, {"a": None}) == {"a": None}


def test_merged_tracks_the_last_layer_to_set_each_node() -> None:
    first = Layer("env", "FIRST", {"a": {"x": 1, "y": 2}})
    second = Layer("env", "SECOND", {"a": {"y": 3}})
    third = Layer("env", "THIRD", {"a": {"x": {"n": 1}}})
    merged = Merged()
    for layer in (first, second, third):
        merged.apply(layer)
    assert merged.values == {"a": {"x": {"n": 1}, "y": 3}}
    assert merged.origins[("a", "y")] is second
    assert merged.origins[("a", "x", "n")] is third
    assert merged.origin(("a", "x", "n", "deeper"))[0] is third


def test_a_flag_layer_sets_one_key_and_reads_as_flag_option() -> None:
    """The API a command-line flag uses (issue 16 item 3 builds on it)."""
    layer = flag_layer("--max-steps", "agent.maxStepsPerTurn", 7)
    assert (layer.kind, layer.values) == ("flag", {"agent": {"maxStepsPerTurn": 7}})
    assert layer.source(("agent", "maxStepsPerTurn")) == "flag --max-steps"
    assert layer.where(("agent", "maxStepsPerTurn")) == "flag --max-steps"
