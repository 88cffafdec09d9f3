"""The environment through the CLI (issue 16 item 6; SPEC §14.2 items 4, 5): `DSH_*` variables
read by pydantic-settings, each leaf's variable in `dsh config show`, exit 2 with a did-you-mean
for a bad key inside a section, every other `DSH_*` variable ignored, and the three settings
documented in `dsh config --help`.

Environments go through `CliRunner.invoke(env=...)` (the `dsh` fixture scrubs the developer's own
`DSH_*` variables first); the process environment is never changed.
"""

from __future__ import annotations

import json

import pytest
from test_config_cmd import leaves


@pytest.mark.parametrize("unrelated", [
    pytest.param({"DSH_FOO__BAR": "1"}, id="nested-unrelated"),
    pytest.param({"DSH_VERBOSE": "yes", "DSH_HOME__X": "1", "DSH_MODELS__MODEL": "x"}, id="no-section"),
])
def test_a_dsh_variable_that_names_no_section_is_ignored_by_every_command(dsh, home, unrelated):
    """`DSH_FOO__BAR=1` used to stop every command with exit 2."""
    shown = dsh("config", "show", "--json", env=unrelated)
    ran = dsh("run", "--transcript", "hello", "--home", home, env=unrelated)

    assert (shown.exit_code, shown.stderr) == (0, "")
    assert json.loads(shown.stdout)["provenance"]["model.model"] == "profiles/default.yaml:1"
    assert (ran.exit_code, ran.stderr) == (0, "")


@pytest.mark.parametrize(("name", "expected"), [
    pytest.param("DSH_MODEL__BASEURL_X", "model.baseurl_x: unknown key; did you mean DSH_MODEL__BASE_URL?",
                 id="close-key"),
    pytest.param("DSH_AGENT__MAX_STEPS", "agent.max_steps: unknown key; did you mean DSH_AGENT__MAX_STEPS_PER_TURN?",
                 id="prefix-of-a-key"),
    pytest.param("DSH_RUN__PARKED__NOW", "run.parked.now: unknown key; did you mean DSH_RUN__PARKED?",
                 id="past-a-leaf"),
    pytest.param("DSH_LIMITS__WHATEVER", "limits.whatever: unknown key", id="nothing-close"),
])
def test_a_bad_key_inside_a_section_is_exit_2_with_a_did_you_mean(dsh, home, name, expected):
    for args in (("config", "show"), ("run", "--transcript", "hello", "--home", str(home))):
        result = dsh(*args, env={name: "1"})
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr == f"dsh: environment {name}: {expected}\n"
    assert not (home / "sessions").exists()


def test_every_leaf_names_the_variable_that_set_it(dsh):
    """Provenance per key: a section's JSON object names its variable on each leaf it sets, and a
    nested variable applied after it wins its own leaf."""
    env = {"DSH_MODEL": '{"model": "from-json", "maxTokens": 64, "retry": {"maxAttempts": 2}}',
           "DSH_MODEL__MODEL": "from-nested", "dsh_subagents__max_depth": "5"}

    shown = dsh("config", "show", env=env)

    assert (shown.exit_code, shown.stderr) == (0, "")
    got = leaves(shown.stdout)
    assert got["model.model"] == ("from-nested", "env DSH_MODEL__MODEL")
    assert got["model.maxTokens"] == ("64", "env DSH_MODEL")
    assert got["model.retry.maxAttempts"] == ("2", "env DSH_MODEL")
    assert got["model.retry.maxBackoffSeconds"] == ("30.0", "default")
    assert got["subagents.maxDepth"] == ("5", "env dsh_subagents__max_depth")
    assert got["model.baseUrl"] == ("https://api.deepseek.com", "profiles/default.yaml:1")


def test_dsh_profile_chooses_the_profile(dsh):
    shown = dsh("config", "show", "--json", env={"DSH_PROFILE": "test"})

    assert shown.exit_code == 0
    data = json.loads(shown.stdout)
    assert data["profile"].endswith("profiles/test.yaml")
    assert data["provenance"]["model.provider"] == "profiles/test.yaml:1"


@pytest.mark.parametrize("args", [("config", "--help"), ("config", "show", "--help")])
def test_config_help_documents_the_environment(dsh, args):
    result = dsh(*args, env={"COLUMNS": "200"})

    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for fragment in ("DSH_HOME is the storage root", "DSH_PROFILE names the profile",
                     "DSH_DEBUG=1 prints an internal error's traceback", "other DSH_* variables are ignored"):
        assert fragment in text, fragment


def test_the_api_key_value_never_reaches_config_show(dsh):
    shown = dsh("config", "show", "--json", env={"DEEPSEEK_API_KEY": "sk-secret-value-123"})

    assert shown.exit_code == 0 and "sk-secret-value-123" not in shown.stdout
    assert json.loads(shown.stdout)["config"]["model"]["apiKeyEnv"] == "DEEPSEEK_API_KEY"
