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


# ---- the lean road (issue 13): a scalar leaf's variable is read without pydantic-settings ----------

from typing import Any  # noqa: E402

import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dsh.loader.config import _environment, compose  # noqa: E402
from dsh.loader.config.lean import CONFIG, SCHEMAS  # noqa: E402
from dsh.loader.errors import ConfigError  # noqa: E402
from dsh.loader.lean import Record  # noqa: E402

_SPELLINGS = ["true", "false", "True", "FALSE", "1", "0", "yes", "off", "t", "12", "012", "-3", "-0", "+4", " 5",
              "1_000", "1.5", "-0.25", "1e3", ".5", "2.", "nan", "inf", "null", "None", "", "x", "quiet", "wait",
              "http://x", "https://api.example.com/v1", "MY_KEY", "9" * 20, "0.1" + "1" * 20, "release", "temporal"]


@st.composite
def _variable(draw: st.DrawFn) -> tuple[str, str]:
    """A `DSH_*` name along the tables (field names or aliases, in any case; now and then a typo,
    a section, or a segment past a leaf) and a value from spellings pydantic parses, or refuses."""
    schema, segments = CONFIG, []
    while True:
        field = draw(st.sampled_from(schema.fields))
        kind = field.type[1] if field.type[0] == "opt" else field.type
        segment = draw(st.sampled_from([field.name, field.alias, field.name.upper(), field.alias.lower()]))
        segments.append(draw(st.sampled_from([segment] * 6 + [segment + "x"])))
        if field.type[0] != "model" or draw(st.integers(0, 5)) == 0:
            break
        schema = SCHEMAS[field.type[1]]
    if draw(st.integers(0, 9)) == 0:
        segments.append("extra")
    name = draw(st.sampled_from(["DSH_", "dsh_"])) + "__".join(segments)
    own = _FOR_KIND.get(kind[0], []) + (list(kind[1]) if kind[0] == "lit" else [])
    return name, draw(st.sampled_from(own or _SPELLINGS) if draw(st.booleans()) else st.sampled_from(_SPELLINGS))


_FOR_KIND = {  # the spellings the lean road parses, and their near misses
    "bool": ["true", "false", "True", "1", "0", "yes"],
    "int": ["0", "7", "1010", "-3", "012", "+4", " 5", "1_000", "9" * 20, "5.0"],
    "float": ["0.5", "1", "2.25", "-0.25", "-0", "1e3", ".5", "nan", "3600", "86401"],
}


def _pydantic_road(monkeypatch: pytest.MonkeyPatch, call: Any) -> Any:
    with monkeypatch.context() as m:
        m.setattr(_environment, "_lean_leaf", lambda segments: None)
        return call()


def _outcome(call: Any) -> Any:
    try:
        return call()
    except ConfigError as exc:
        return ("ConfigError", str(exc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(variables=st.lists(_variable(), max_size=3))
def test_both_roads_give_the_same_layers_and_the_same_config(variables, monkeypatch, tmp_path):
    environ = dict(variables)
    assert env_layers(environ) == _pydantic_road(monkeypatch, lambda: env_layers(environ))

    def composed(**kwargs: Any) -> Any:
        result = compose(profile="test", environ=environ, cwd=tmp_path, **kwargs)
        return result.to_json(), result.to_yaml()

    lean = _outcome(lambda: composed(lean=True))
    assert lean == _outcome(lambda: composed())
    assert lean == _pydantic_road(monkeypatch, lambda: _outcome(lambda: composed(lean=True)))


@pytest.mark.parametrize(("name", "value", "parsed"), [
    ("DSH_PERSISTENCE__FSYNC", "true", True),
    ("dsh_limits__max_children", "1010", 1010),
    ("DSH_MODEL__TEMPERATURE", "0.5", 0.5),
    ("DSH_SUBAGENTS__REPORTDELIVERY", "quiet", "quiet"),
])
def test_a_plain_leaf_variable_composes_lean_without_pydantic_settings(name, value, parsed, monkeypatch, tmp_path):
    def refuse(*args: Any) -> Any:
        raise AssertionError("pydantic's road was taken")

    monkeypatch.setattr(_environment, "_check", refuse)
    config = compose(profile="test", environ={name: value}, cwd=tmp_path, lean=True).config
    assert isinstance(config, Record)
    section, key = name.lower().removeprefix("dsh_").split("__")
    field = next(f for f in next(s for s in SCHEMAS.values() if s is not CONFIG and
                                 s.name.lower() == section + "config").fields if key in (f.name, f.alias.lower()))
    assert getattr(getattr(config, section), field.name) == parsed
