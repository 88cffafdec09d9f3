"""`dsh config show` (SPEC §14.2, §19; matrix 98–100): the composed configuration as YAML with a
`# <source>` comment per leaf, and one located line on stderr (exit 2) when a layer is wrong.

Environment layers are given through `CliRunner.invoke(env=...)`; the process environment is never
changed.
"""

from __future__ import annotations

import json

import pytest
from cli_kit import write_yaml
from ruamel.yaml import YAML


def leaves(yaml_text: str) -> dict[str, tuple[str, str]]:
    """`{dotted.path: (value text, source)}` from the rendered YAML."""
    out: dict[str, tuple[str, str]] = {}
    stack: list[str] = []
    for line in yaml_text.splitlines():
        indent = (len(line) - len(line.lstrip())) // 2
        stack = stack[:indent]
        key, _, rest = line.strip().partition(":")
        if not rest.strip():
            stack.append(key)
            continue
        value, _, source = rest.strip().rpartition("  # ")
        out[".".join([*stack, key])] = (value.strip(), source)
    return out


def test_m98_overlay_over_profile_merges_and_cites_the_overlay_line(dsh, tmp_path):
    """Matrix 98: the overlay's leaves win with `<file>:<line>`; sibling leaves of the same mapping
    keep the profile's source (mappings deep-merge); the text loads back to the --json values."""
    overlay = tmp_path / "mine.yaml"
    overlay.write_text("# my overlay\nmodel:\n  model: deepseek-reasoner\nsubagents:\n  maxDepth: 5\n")

    shown = dsh("config", "show", "--profile", "default", "--overlay", overlay)
    as_json = dsh("config", "show", "--profile", "default", "--overlay", overlay, "--json")

    assert (shown.exit_code, shown.stderr, as_json.exit_code) == (0, "", 0)
    got = leaves(shown.stdout)
    assert got["model.model"] == ("deepseek-reasoner", f"{overlay}:3")
    assert got["subagents.maxDepth"] == ("5", f"{overlay}:5")
    assert got["model.provider"] == ("openai-compatible", "profiles/default.yaml:1")
    assert got["subagents.reportDelivery"][1].startswith("profiles/default.yaml:")
    assert got["persistence.batchDelayMs"] == ("200", "default")
    data = json.loads(as_json.stdout)
    assert YAML(typ="safe", pure=True).load(shown.stdout) == data["config"]
    assert data["provenance"]["model.model"] == f"{overlay}:3"
    assert data["layers"][-1] == str(overlay)


def test_m100_environment_wins_over_overlays(dsh, tmp_path):
    """Matrix 100: `DSH_SUBAGENTS__REPORT_DELIVERY=quiet` beats an overlay saying `wakeup`."""
    overlay = write_yaml(tmp_path / "loud.yaml", {"subagents": {"reportDelivery": "wakeup"}})

    shown = dsh("config", "show", "--overlay", overlay, env={"DSH_SUBAGENTS__REPORT_DELIVERY": "quiet"})

    assert (shown.exit_code, shown.stderr) == (0, "")
    assert leaves(shown.stdout)["subagents.reportDelivery"] == ("quiet", "env DSH_SUBAGENTS__REPORT_DELIVERY")


def test_a_transcript_forces_release_of_parked_work(dsh):
    """§17.2: under a transcript `run.parked` is `release`, shown with source `transcript`."""
    shown = dsh("config", "show", "--transcript", "report-then-settle")

    assert shown.exit_code == 0
    got = leaves(shown.stdout)
    assert got["run.parked"] == ("release", "transcript")
    assert got["subagents.reportDelivery"] == ("quiet", "overlays/quiet-reports.yaml:1")


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("subagents:\n  reportDelivery: next-step\n",
                 ":2:3: subagents.reportDelivery: Input should be 'wakeup' or 'quiet'", id="m83-bad-value"),
    pytest.param("subagents:\n  maxDepth: 2\n  reportDelivry: quiet\n",
                 ":3:3: subagents.reportDelivry: unknown key", id="m99-unknown-key"),
    pytest.param("model:\n  model: [unclosed\n", ":3:1: ", id="m99-malformed-yaml"),
    pytest.param("testing:\n  fences: true\n",
                 ":2:3: testing.fences: allowed only on top of the shipped test profile", id="testing-outside-test-profile"),
])
def test_m99_a_bad_overlay_is_one_located_line_and_exit_2(dsh, tmp_path, text, expected):
    """Matrix 99 / 83: `<file>:<line>:<col>: <key.path>: <problem>`, at the key's position; nothing on
    stdout."""
    overlay = tmp_path / "bad.yaml"
    overlay.write_text(text)

    shown = dsh("config", "show", "--profile", "default", "--overlay", overlay)

    assert (shown.exit_code, shown.stdout) == (2, "")
    assert shown.stderr.startswith(f"dsh: {overlay}{expected}"), shown.stderr
    assert shown.stderr.count("\n") == 1


@pytest.mark.parametrize(("name", "value", "expected"), [
    pytest.param("DSH_SUBAGENTS__REPORT_DELIVERY", "next-step",
                 "dsh: environment DSH_SUBAGENTS__REPORT_DELIVERY: subagents.reportDelivery: Input should be 'wakeup' or 'quiet'\n",
                 id="m99-bad-env-value"),
    pytest.param("DSH_SUBAGENTS__REPORT_DELIVRY", "quiet",
                 "dsh: environment DSH_SUBAGENTS__REPORT_DELIVRY: subagents.report_delivry: unknown key; "
                 "did you mean DSH_SUBAGENTS__REPORT_DELIVERY?\n",
                 id="env-names-no-key"),
])
def test_m99_a_bad_environment_variable_is_named(dsh, name, value, expected):
    """Known segments take the YAML spelling; an unknown one is echoed as the variable spelled it."""
    shown = dsh("config", "show", env={name: value})

    assert (shown.exit_code, shown.stdout, shown.stderr) == (2, "", expected)
