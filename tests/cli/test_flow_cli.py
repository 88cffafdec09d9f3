"""`dsh flow` (SPEC §19, §20; matrix 114, CLI half): the flow YAML it prints is byte-identical to the
snapshot the pytest plugin stores for the same transcript."""

from __future__ import annotations

from pathlib import Path

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
