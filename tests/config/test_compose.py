"""Composing profile, transcript overlays, overlays and environment (SPEC §14.2, §17.2, §22).

Every test passes `environ=` and `cwd=tmp_path`, so nothing reads or changes process state. Bad-input
tests pin the whole `<file>:<line>:<col>: <key.path>:` prefix; positions come from the text via `at`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from dsh.loader.config import ComposedConfig, compose, flag_layer
from dsh.loader.errors import ConfigError
from dsh.loader.shipped import available_names, shipped_dir
from dsh.loader.transcripts import load_transcript


def write(directory: Path, name: str, text: str) -> str:
    body = textwrap.dedent(text).lstrip("\n")
    (directory / name).write_text(body, encoding="utf-8")
    return body


def at(body: str, needle: str) -> str:
    """1-based `line:col` of the first `needle` in `body`."""
    index = body.index(needle)
    line = body.count("\n", 0, index) + 1
    col = index - (body.rfind("\n", 0, index) + 1) + 1
    return f"{line}:{col}"


def run(tmp_path: Path, **kwargs: object) -> ComposedConfig:
    kwargs.setdefault("environ", {})
    return compose(cwd=tmp_path, **kwargs)  # type: ignore[arg-type]


def error(tmp_path: Path, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        run(tmp_path, **kwargs)
    assert info.value.code == "CONFIG_INVALID"
    return info.value.message


def write_transcript(directory: Path, overlays: list[str]) -> Path:
    path = directory / "scenario.yaml"
    listed = ", ".join(overlays)
    path.write_text(
        f"version: 1\nname: scenario\ntask: go\noverlays: [{listed}]\nagents:\n  root:\n    replies:\n      - text: ok\n",
        encoding="utf-8",
    )
    return path


# --- layering and provenance -------------------------------------------------------------------


def test_m98_overlay_merges_into_profile_and_show_cites_the_overlay_line(tmp_path: Path) -> None:
    """Matrix 98: mappings merge (the profile's sibling keys survive) and `config show` cites the
    overlay's file:line for the leaf it changed."""
    write(tmp_path, "base.yaml", "model:\n  provider: replay\n  model: base-model\nsubagents:\n  maxDepth: 2\n")
    body = write(tmp_path, "over.yaml", "# a comment first\nmodel:\n  model: other-model\n")
    composed = run(tmp_path, profile="base.yaml", overlays=["over.yaml"])

    assert composed.config.model.provider == "replay"  # from the profile, not replaced
    assert composed.config.model.model == "other-model"
    assert composed.config.subagents.max_depth == 2
    line = at(body, "model:\n  model").split(":")[0]
    assert composed.provenance["model.model"] == f"over.yaml:{int(line) + 1}"
    assert composed.provenance["model.provider"] == "base.yaml:2"
    assert composed.provenance["model.readTimeoutSeconds"] == "default"
    shown = [row for row in composed.to_yaml().splitlines() if row.strip().startswith("model: ")]
    assert len(shown) == 1 and shown[0].split("#")[1].strip() == "over.yaml:3"
    assert composed.layers == [tmp_path / "base.yaml", tmp_path / "over.yaml"]


def test_overlays_apply_in_argv_order(tmp_path: Path) -> None:
    write(tmp_path, "one.yaml", "subagents: {maxDepth: 1}\n")
    write(tmp_path, "two.yaml", "subagents: {maxDepth: 2}\n")
    assert run(tmp_path, overlays=["one.yaml", "two.yaml"]).config.subagents.max_depth == 2
    assert run(tmp_path, overlays=["two.yaml", "one.yaml"]).config.subagents.max_depth == 1


def test_m100_environment_wins_over_overlays(tmp_path: Path) -> None:
    """Matrix 100."""
    write(tmp_path, "wake.yaml", "subagents: {reportDelivery: wakeup}\n")
    composed = run(tmp_path, overlays=["wake.yaml"], environ={"DSH_SUBAGENTS__REPORT_DELIVERY": "quiet"})
    assert composed.config.subagents.report_delivery == "quiet"
    assert composed.provenance["subagents.reportDelivery"] == "env DSH_SUBAGENTS__REPORT_DELIVERY"


def test_environment_strings_are_coerced_by_pydantic(tmp_path: Path) -> None:
    composed = run(
        tmp_path,
        environ={
            "DSH_PERSISTENCE__FSYNC": "false",
            "DSH_MODEL__TEMPERATURE": "0.5",
            "DSH_MODEL__BASE_URL": "http://x:1",
        },
    )
    assert composed.config.persistence.fsync is False
    assert composed.config.model.temperature == 0.5
    assert composed.config.model.base_url == "http://x:1"


def test_transcript_overlays_resolve_beside_the_transcript_and_precede_argv_overlays(tmp_path: Path) -> None:
    scenario_dir = tmp_path / "scenarios"
    scenario_dir.mkdir()
    write(scenario_dir, "local.yaml", "agent: {maxStepsPerTurn: 7}\nsubagents: {maxDepth: 5}\n")
    write(tmp_path, "argv.yaml", "subagents: {maxDepth: 6}\n")
    transcript = load_transcript(write_transcript(scenario_dir, ["quiet-reports", "local.yaml"]))
    composed = run(tmp_path, transcript=transcript, overlays=["argv.yaml"])

    assert composed.config.subagents.report_delivery == "quiet"  # shipped overlay by name
    assert composed.config.agent.max_steps_per_turn == 7
    assert composed.config.subagents.max_depth == 6
    assert composed.provenance["agent.maxStepsPerTurn"] == "scenarios/local.yaml:1"
    assert composed.layers == [
        shipped_dir("profiles") / "test.yaml",
        shipped_dir("overlays") / "quiet-reports.yaml",
        scenario_dir / "local.yaml",
        tmp_path / "argv.yaml",
    ]


def test_transcript_forces_parked_release_over_every_layer(tmp_path: Path) -> None:
    """§17.2: nobody can resume parked work in a transcript run."""
    transcript = load_transcript(write_transcript(tmp_path, []))
    composed = run(tmp_path, profile="default", transcript=transcript, environ={"DSH_RUN__PARKED": "wait"})
    assert composed.config.run.parked == "release"
    assert composed.provenance["run.parked"] == "transcript"
    assert run(tmp_path, profile="default").config.run.parked == "wait"


# --- profile choice ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "environ", "with_transcript", "expected"),
    [
        pytest.param("default", {"DSH_PROFILE": "test"}, True, "default", id="argument-wins"),
        pytest.param(None, {"DSH_PROFILE": "default"}, True, "default", id="env-beats-transcript"),
        pytest.param(None, {"dsh_profile": "test"}, False, "test", id="env-case-insensitive"),
        pytest.param(None, {}, True, "test", id="transcript-means-test"),
        pytest.param(None, {}, False, "default", id="default"),
    ],
)
def test_profile_precedence(
    tmp_path: Path, profile: str | None, environ: dict[str, str], with_transcript: bool, expected: str
) -> None:
    transcript = load_transcript(write_transcript(tmp_path, [])) if with_transcript else None
    composed = run(tmp_path, profile=profile, environ=environ, transcript=transcript)
    assert composed.profile_path == shipped_dir("profiles") / f"{expected}.yaml"


def test_unknown_profile_name_lists_available_names(tmp_path: Path) -> None:
    message = error(tmp_path, profile="nope")
    assert message == "unknown profile 'nope'; available: " + ", ".join(available_names("profiles"))
    assert "default" in message and "test" in message


def test_unknown_overlay_name_lists_available_names(tmp_path: Path) -> None:
    message = error(tmp_path, overlays=["loud-reports"])
    assert "unknown overlay 'loud-reports'" in message and "quiet-reports" in message


@pytest.mark.parametrize("overlay", [*available_names("overlays"), None])
@pytest.mark.parametrize("profile", available_names("profiles"))
def test_shipped_files_compose_cleanly(tmp_path: Path, profile: str, overlay: str | None) -> None:
    composed = run(tmp_path, profile=profile, overlays=[overlay] if overlay else [])
    assert composed.config.model.provider == ("replay" if profile == "test" else "openai-compatible")


def test_shipped_test_profile_matches_the_spec(tmp_path: Path) -> None:
    config = run(tmp_path, profile="test").config
    assert config.model.provider == "replay"
    assert (config.persistence.batch_delay_ms, config.persistence.fsync) == (0, False)
    assert config.run.parked == "release"
    assert (config.testing.fences, config.testing.fence_timeout_seconds) == (True, 10)


def test_shipped_overlays_set_what_the_spec_says(tmp_path: Path) -> None:
    assert run(tmp_path, overlays=["quiet-reports"]).config.subagents.report_delivery == "quiet"
    assert run(tmp_path, overlays=["deepseek-reasoner"]).config.model.model == "deepseek-reasoner"


# --- fence gating ------------------------------------------------------------------------------


def test_testing_keys_are_refused_on_the_default_profile(tmp_path: Path) -> None:
    body = write(tmp_path, "fences.yaml", "subagents: {maxDepth: 2}\ntesting:\n  fences: true\n")
    assert error(tmp_path, overlays=["fences.yaml"]) == (
        f"fences.yaml:{at(body, 'fences: true')}: testing.fences: allowed only on top of the shipped test profile"
    )


def test_testing_keys_are_refused_in_a_copy_of_the_test_profile(tmp_path: Path) -> None:
    """The gate compares files, not names: a look-alike profile does not unlock fences."""
    body = (shipped_dir("profiles") / "test.yaml").read_text(encoding="utf-8")
    (tmp_path / "mytest.yaml").write_text(body, encoding="utf-8")
    message = error(tmp_path, profile="mytest.yaml")
    assert message.splitlines() == [
        f"mytest.yaml:{at(body, 'fences:')}: testing.fences: allowed only on top of the shipped test profile",
        (
            f"mytest.yaml:{at(body, 'fenceTimeout')}: testing.fenceTimeoutSeconds: "
            "allowed only on top of the shipped test profile"
        ),
    ]


def test_testing_environment_variable_is_refused_off_the_test_profile(tmp_path: Path) -> None:
    assert error(tmp_path, environ={"DSH_TESTING__FENCES": "true"}) == (
        "environment DSH_TESTING__FENCES: testing.fences: allowed only on top of the shipped test profile"
    )


def test_testing_keys_on_top_of_the_test_profile_may_be_overridden(tmp_path: Path) -> None:
    """§14.2 item 6, needed by matrix 93's short fence timeout."""
    write(tmp_path, "short.yaml", "testing:\n  fenceTimeoutSeconds: 0.2\n")
    composed = run(tmp_path, profile="test", overlays=["short.yaml"])
    assert composed.config.testing.fence_timeout_seconds == 0.2
    assert composed.config.testing.fences is True
    assert composed.provenance["testing.fenceTimeoutSeconds"] == "short.yaml:2"
    assert composed.provenance["testing.fences"] == "profiles/test.yaml:4"


@pytest.mark.parametrize(
    ("profile", "pytest_plugin", "allowed"),
    [
        pytest.param("default", False, False, id="default"),
        pytest.param("test", False, True, id="test-profile"),
        pytest.param("default", True, True, id="pytest-plugin"),
    ],
)
def test_fences_allowed(tmp_path: Path, profile: str, pytest_plugin: bool, allowed: bool) -> None:
    assert run(tmp_path, profile=profile, pytest_plugin=pytest_plugin).fences_allowed is allowed


# --- bad input (§22) ---------------------------------------------------------------------------


def test_m83_report_delivery_next_step_names_file_line_and_key(tmp_path: Path) -> None:
    """Matrix 83."""
    body = write(tmp_path, "bad.yaml", "subagents:\n  maxDepth: 2\n  reportDelivery: next-step\n")
    assert error(tmp_path, overlays=["bad.yaml"]) == (
        f"bad.yaml:{at(body, 'reportDelivery')}: subagents.reportDelivery: Input should be 'wakeup' or 'quiet'"
    )


def test_m99_unknown_key_reports_the_key_position(tmp_path: Path) -> None:
    """Matrix 99 (unknown key), with the did-you-mean of issue 11 item 5."""
    body = write(tmp_path, "typo.yaml", "subagents:\n  reportDeliveryy: quiet\n")
    assert error(tmp_path, overlays=["typo.yaml"]) == (
        f"typo.yaml:{at(body, 'reportDeliveryy')}: subagents.reportDeliveryy: unknown key; did you mean reportDelivery?"
    )


def test_m99_malformed_yaml_names_file_line_and_column(tmp_path: Path) -> None:
    """Matrix 99 (malformed YAML)."""
    write(tmp_path, "broken.yaml", "subagents:\n  maxDepth: [1, 2\n")
    message = error(tmp_path, overlays=["broken.yaml"])
    assert message.startswith("broken.yaml:3:1: ")
    assert "flow sequence" in message


def test_m99_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    """Matrix 99 (bad env value)."""
    message = error(tmp_path, environ={"DSH_SUBAGENTS__MAX_DEPTH": "deep"})
    assert message.startswith(
        "environment DSH_SUBAGENTS__MAX_DEPTH: subagents.maxDepth: Input should be a valid integer"
    )


def test_unknown_environment_key_in_a_section_is_an_error(tmp_path: Path) -> None:
    """Issue 16 item 6: only a variable whose first segment names a section is judged."""
    assert error(tmp_path, environ={"DSH_RUN__BAR": "1", "DSH_FOO__BAR": "1"}) == (
        "environment DSH_RUN__BAR: run.bar: unknown key")


def test_flags_apply_after_the_environment_and_show_as_flag_option(tmp_path: Path) -> None:
    composed = compose(cwd=tmp_path, environ={"DSH_MODEL__MODEL": "from-env"},
                       flags=[flag_layer("--model", "model.model", "from-flag")])
    assert composed.config.model.model == "from-flag"
    assert composed.provenance["model.model"] == "flag --model"
    assert error(tmp_path, flags=[flag_layer("--max-steps", "agent.maxStepsPerTurn", 0)]) == (
        "flag --max-steps: agent.maxStepsPerTurn: Input should be greater than or equal to 1")


def test_snake_case_keys_in_yaml_are_unknown(tmp_path: Path) -> None:
    """§14.1: YAML spells keys in camelCase; snake_case belongs to the environment."""
    body = write(tmp_path, "snake.yaml", "subagents:\n  report_delivery: quiet\n")
    assert error(tmp_path, overlays=["snake.yaml"]) == (
        f"snake.yaml:{at(body, 'report_delivery')}: subagents.report_delivery: unknown key; did you mean reportDelivery?"
    )


def test_every_problem_gets_its_own_line(tmp_path: Path) -> None:
    body = write(tmp_path, "many.yaml", "model:\n  maxTokens: 0\nagent:\n  nope: 1\n")
    assert error(tmp_path, overlays=["many.yaml"], environ={"DSH_RUN__PARKED": "drop"}).splitlines() == [
        f"many.yaml:{at(body, 'maxTokens')}: model.maxTokens: Input should be greater than or equal to 1",
        f"many.yaml:{at(body, 'nope')}: agent.nope: unknown key",
        "environment DSH_RUN__PARKED: run.parked: Input should be 'wait' or 'release'",
    ]


def test_value_errors_drop_pydantics_prefix(tmp_path: Path) -> None:
    body = write(tmp_path, "url.yaml", "model: {baseUrl: ftp://example.com}\n")
    assert error(tmp_path, overlays=["url.yaml"]) == (
        f"url.yaml:{at(body, 'baseUrl')}: model.baseUrl: must be an http:// or https:// URL"
    )


def test_explicit_null_on_a_non_nullable_field_is_an_error(tmp_path: Path) -> None:
    body = write(tmp_path, "null.yaml", "subagents:\n  maxDepth: null\n")
    message = error(tmp_path, overlays=["null.yaml"])
    assert message.startswith(f"null.yaml:{at(body, 'maxDepth')}: subagents.maxDepth: ")


def test_explicit_null_on_a_section_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "null.yaml", "run:\n")
    assert error(tmp_path, overlays=["null.yaml"]).startswith("null.yaml:1:1: run: ")


def test_explicit_null_on_a_nullable_field_unsets_it(tmp_path: Path) -> None:
    write(tmp_path, "set.yaml", "model: {maxTokens: 100}\n")
    write(tmp_path, "unset.yaml", "model: {maxTokens: null}\n")
    composed = run(tmp_path, overlays=["set.yaml", "unset.yaml"])
    assert composed.config.model.max_tokens is None
    assert composed.provenance["model.maxTokens"] == "unset.yaml:1"


def test_empty_overlay_file_is_an_empty_mapping(tmp_path: Path) -> None:
    write(tmp_path, "empty.yaml", "")
    write(tmp_path, "comments.yaml", "# nothing to see\n")
    assert run(tmp_path, overlays=["empty.yaml", "comments.yaml"]).config == run(tmp_path).config


def test_non_mapping_document_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, "list.yaml", "- subagents\n")
    assert error(tmp_path, overlays=["list.yaml"]) == "list.yaml:1:1: a configuration file must be a YAML mapping"


def test_duplicate_key_is_an_error(tmp_path: Path) -> None:
    body = write(tmp_path, "dup.yaml", "subagents:\n  maxDepth: 1\n  maxDepth: 2\n")
    message = error(tmp_path, overlays=["dup.yaml"])
    assert message.startswith(f"dup.yaml:{at(body, 'maxDepth: 2')}: ")
    assert 'duplicate key "maxDepth"' in message


def test_missing_overlay_path_is_an_error(tmp_path: Path) -> None:
    assert error(tmp_path, overlays=["missing.yaml"]) == f"{tmp_path / 'missing.yaml'}: no such file"
