"""Layer merging and environment parsing (SPEC §14.2 items 2 and 4), below `compose`."""

from __future__ import annotations

from loader.config import deep_merge
from loader.config._layers import Layer, Merged, env_layers


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


def test_env_segments_are_snake_case_case_insensitive_and_spelled_camel_case() -> None:
    layers, problems = env_layers(
        {"DSH_SUBAGENTS__REPORT_DELIVERY": "quiet", "dsh_model__retry__max_attempts": "2", "PATH": "/bin"}
    )
    assert problems == []
    assert [layer.values for layer in layers] == [
        {"subagents": {"reportDelivery": "quiet"}},
        {"model": {"retry": {"maxAttempts": "2"}}},
    ]


def test_env_settings_and_unrelated_variables_are_not_config() -> None:
    layers, problems = env_layers({"DSH_HOME": "/h", "DSH_PROFILE": "test", "DSH_VERBOSE": "1"})
    assert (layers, problems) == ([], [])


def test_env_unknown_nested_key_is_a_problem_naming_the_variable() -> None:
    _, problems = env_layers({"DSH_FOO__BAR": "1", "DSH_SUBAGENTS__MAX_DEPTH__X": "1", "DSH_HOME__X": "1"})
    assert problems == [
        "environment DSH_FOO__BAR: foo.bar: unknown key",
        "environment DSH_HOME__X: home.x: unknown key",
        "environment DSH_SUBAGENTS__MAX_DEPTH__X: subagents.maxDepth.x: unknown key",
    ]


def test_env_section_takes_a_json_object_applied_before_nested_variables() -> None:
    layers, problems = env_layers(
        {"DSH_MODEL__MODEL": "nested", "DSH_MODEL": '{"model": "json", "max_tokens": 5, "retry": {"max_attempts": 2}}'}
    )
    assert problems == []
    assert [layer.label for layer in layers] == ["DSH_MODEL", "DSH_MODEL__MODEL"]
    assert layers[0].values == {"model": {"model": "json", "maxTokens": 5, "retry": {"maxAttempts": 2}}}


def test_env_section_value_that_is_not_a_json_object_is_a_problem() -> None:
    _, problems = env_layers({"DSH_RUN": "release", "DSH_MODEL__RETRY": "[1]"})
    assert problems == [  # section-wide variables come first, as they are applied first
        "environment DSH_RUN: run: not valid JSON: Expecting value",
        "environment DSH_MODEL__RETRY: model.retry: expected a JSON object",
    ]
