"""The environment layer (SPEC §14.2 item 4; issue 16 item 6): `DSH_*` variables decoded by
pydantic-settings, one layer per variable. The CLI-level rules (exit 2, did-you-mean, ignored
variables, provenance in `dsh config show`) are in tests/cli/test_config_env.py."""

from __future__ import annotations

from dsh.loader.config import Config, DshEnvironment
from dsh.loader.config._environment import env_layers, env_profile


def test_the_settings_model_declares_every_configuration_section_and_the_three_settings() -> None:
    assert set(DshEnvironment.model_fields) == {*Config.model_fields, "home", "profile", "debug"}


def test_env_segments_are_snake_case_case_insensitive_and_spelled_camel_case() -> None:
    layers, problems = env_layers(
        {"DSH_SUBAGENTS__REPORT_DELIVERY": "quiet", "dsh_model__retry__max_attempts": "2", "PATH": "/bin"}
    )
    assert problems == []
    assert [layer.values for layer in layers] == [  # in sorted name order
        {"subagents": {"reportDelivery": "quiet"}},
        {"model": {"retry": {"maxAttempts": "2"}}},
    ]
    assert [layer.label for layer in layers] == ["DSH_SUBAGENTS__REPORT_DELIVERY", "dsh_model__retry__max_attempts"]


def test_the_camel_case_alias_is_accepted_as_a_segment_as_pydantic_settings_does() -> None:
    layers, problems = env_layers({"DSH_MODEL__BASEURL": "http://x"})
    assert (problems, [layer.values for layer in layers]) == ([], [{"model": {"baseUrl": "http://x"}}])


def test_null_sets_null() -> None:
    layers, problems = env_layers({"DSH_MODEL__API_KEY_ENV": "null", "DSH_MODEL": '{"max_tokens": null}'})
    assert problems == []
    assert [layer.values for layer in layers] == [{"model": {"maxTokens": None}}, {"model": {"apiKeyEnv": None}}]


def test_variables_whose_first_segment_names_no_section_are_ignored() -> None:
    environ = {"DSH_HOME": "/h", "DSH_PROFILE": "test", "DSH_DEBUG": "1", "DSH_VERBOSE": "1",
               "DSH_FOO__BAR": "1", "DSH_HOME__X": "1", "DSH___": "1", "DSH_MODELS__MODEL": "x"}
    assert env_layers(environ) == ([], [])


def test_an_unknown_key_in_a_section_is_a_problem_with_a_did_you_mean() -> None:
    _, problems = env_layers({
        "DSH_SUBAGENTS__REPORT_DELIVRY": "quiet",
        "DSH_MODEL__RETRY__MAX_ATTEMPT": "2",
        "DSH_SUBAGENTS__MAX_DEPTH__X": "1",
        "DSH_AGENT__NOPE": "1",
        "dsh_run__parkd": "wait",
    })
    assert problems == [
        "environment DSH_AGENT__NOPE: agent.nope: unknown key",
        "environment DSH_MODEL__RETRY__MAX_ATTEMPT: model.retry.max_attempt: "
        "unknown key; did you mean DSH_MODEL__RETRY__MAX_ATTEMPTS?",
        "environment DSH_SUBAGENTS__MAX_DEPTH__X: subagents.maxDepth.x: unknown key; did you mean DSH_SUBAGENTS__MAX_DEPTH?",
        "environment DSH_SUBAGENTS__REPORT_DELIVRY: subagents.report_delivry: "
        "unknown key; did you mean DSH_SUBAGENTS__REPORT_DELIVERY?",
        "environment dsh_run__parkd: run.parkd: unknown key; did you mean dsh_run__parked?",
    ]


def test_a_section_takes_a_json_object_applied_before_nested_variables() -> None:
    layers, problems = env_layers(
        {"DSH_MODEL__MODEL": "nested", "DSH_MODEL": '{"model": "json", "max_tokens": 5, "retry": {"maxAttempts": 2}}'}
    )
    assert problems == []
    assert [layer.label for layer in layers] == ["DSH_MODEL", "DSH_MODEL__MODEL"]
    assert layers[0].values == {"model": {"model": "json", "maxTokens": 5, "retry": {"maxAttempts": 2}}}


def test_an_unknown_key_inside_a_json_value_is_named_with_a_did_you_mean() -> None:
    layers, problems = env_layers({"DSH_MODEL": '{"model": "m", "maxTokenz": 5, "zzz": 1}'})
    assert problems == [
        "environment DSH_MODEL: model.maxTokenz: unknown key; did you mean maxTokens?",
        "environment DSH_MODEL: model.zzz: unknown key",
    ]
    assert layers[0].values == {"model": {"model": "m"}}  # unknown keys are not merged


def test_a_section_value_that_is_not_a_json_object_is_a_problem() -> None:
    _, problems = env_layers({"DSH_RUN": "release", "DSH_MODEL__RETRY": "[1]", "DSH_MODEL": "[" * 100_000})
    assert problems == [  # section-wide variables come first, as they are applied first
        "environment DSH_MODEL: model: not valid JSON: nested deeper than 64 levels",
        "environment DSH_RUN: run: not valid JSON: Expecting value",
        "environment DSH_MODEL__RETRY: model.retry: expected a JSON object",
    ]


def test_dsh_profile_is_read_case_insensitively_and_deterministically() -> None:
    assert env_profile({"dsh_profile": "b", "DSH_PROFILE": "a"}) == "a"
    assert env_profile({"DSH_PROFILE": ""}) is None
    assert env_profile({}) is None
