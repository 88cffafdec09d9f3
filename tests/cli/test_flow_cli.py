"""`dsh flow` (SPEC §19, §20; matrix 114, CLI half): the flow YAML it prints is byte-identical to the
snapshot the pytest plugin stores for the same transcript."""

from __future__ import annotations

from pathlib import Path

import pytest

SNAPSHOT = (Path(__file__).resolve().parents[1] / "testing" / "__snapshots__" / "test_plugin"
            / "test_background_settlement_flow_matches_snapshot.flow.yaml")


def test_m114_flow_prints_the_stored_snapshot_byte_for_byte(dsh):
    result = dsh("flow", "background-settlement")

    assert (result.exit_code, result.stderr) == (0, "")
    assert result.stdout_bytes == SNAPSHOT.read_bytes()


def test_flow_of_an_unknown_transcript_exits_2(dsh):
    result = dsh("flow", "nope")

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("dsh: unknown transcript 'nope'; available: ")


# -- issue 10: --repeat, --check, --update ---------------------------------------------------------

TWO_SIBLINGS = Path(__file__).resolve().parents[1] / "replay" / "two-background-siblings.yaml"
SCENARIO_A = (Path(__file__).resolve().parents[1] / "__snapshots__" / "test_scenarios"
              / "test_a_background_settlement_notice_is_steered_into_the_held_root_step.flow.yaml")


def test_repeat_prints_the_one_flow_and_says_so(dsh):
    single = dsh("flow", TWO_SIBLINGS)
    result = dsh("flow", TWO_SIBLINGS, "--repeat", "5")

    assert (result.exit_code, result.stdout) == (0, single.stdout)
    assert result.stderr == "dsh: two-background-siblings: 5 runs, one flow\n"


def test_repeat_with_differing_flows_exits_1_with_the_unified_diff_of_the_first_pair(dsh, threaded_replay):
    result = dsh("flow", TWO_SIBLINGS, "--repeat", "30")

    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "--- two-background-siblings (run 1)"
    assert lines[1].startswith("+++ two-background-siblings (run ")
    assert any(line.startswith("@@ ") for line in lines)
    assert result.stderr.startswith("dsh: two-background-siblings: ")
    assert " distinct flows in 30 runs; runs 1 and " in result.stderr


def test_check_fails_on_a_missing_snapshot_and_update_writes_the_flow_byte_for_byte(dsh, tmp_path):
    snaps = tmp_path / "snaps"

    missing = dsh("flow", "hello", "background-settlement", "--check", snaps)
    assert (missing.exit_code, missing.stdout) == (1, "")
    assert f"dsh: missing snapshot {snaps / 'hello.flow.yaml'}\n" in missing.stderr

    updated = dsh("flow", "hello", "background-settlement", "--check", snaps, "--update")
    assert updated.exit_code == 0
    assert (snaps / "hello.flow.yaml").read_bytes() == dsh("flow", "hello").stdout_bytes
    # The file is what syrupy stores for the same transcript (tests/test_scenarios.py).
    assert (snaps / "background-settlement.flow.yaml").read_bytes() == SCENARIO_A.read_bytes()

    again = dsh("flow", "hello", "background-settlement", "--check", snaps)
    assert (again.exit_code, again.stdout) == (0, "")
    assert again.stderr == "dsh: 2 passed, 0 differ, 0 missing, 0 unused\n"


def test_check_accepts_a_syrupy_snapshot_file_and_diffs_a_changed_one(dsh, tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    (snaps / "background-settlement.flow.yaml").write_bytes(SCENARIO_A.read_bytes())
    assert dsh("flow", "background-settlement", "--check", snaps).exit_code == 0

    changed = SCENARIO_A.read_text().replace("PARENT_RECEIVED_CHILD_RESULT", "SOMETHING_ELSE")
    (snaps / "background-settlement.flow.yaml").write_text(changed)
    result = dsh("flow", "background-settlement", "--check", snaps)

    assert result.exit_code == 1
    assert result.stdout.startswith(f"--- {snaps / 'background-settlement.flow.yaml'}\n+++ background-settlement (this run)\n")
    assert "-  output: SOMETHING_ELSE\n+  output: PARENT_RECEIVED_CHILD_RESULT\n" in result.stdout
    assert "dsh: background-settlement: the flow differs from its snapshot\n" in result.stderr


def test_check_fails_on_an_unused_snapshot_and_update_deletes_it(dsh, tmp_path):
    snaps = tmp_path / "snaps"
    assert dsh("flow", "hello", "--check", snaps, "--update").exit_code == 0
    stale = snaps / "gone.flow.yaml"
    stale.write_text("flow: 1\n")

    result = dsh("flow", "hello", "--check", snaps)
    assert result.exit_code == 1
    assert f"dsh: unused snapshot {stale}\n" in result.stderr

    assert dsh("flow", "hello", "--check", snaps, "--update").exit_code == 0
    assert not stale.exists()


@pytest.mark.parametrize("ci", ["1", "true"])
def test_update_is_refused_in_ci(dsh, tmp_path, ci):
    result = dsh("flow", "hello", "--check", tmp_path / "snaps", "--update", env={"CI": ci})

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("dsh: --update is refused in CI")
    assert not (tmp_path / "snaps").exists()


def test_several_transcripts_without_check_is_a_usage_error(dsh):
    result = dsh("flow", "hello", "background-settlement")

    assert (result.exit_code, result.stderr) == (2, "dsh: several transcripts need --check DIR\n")
