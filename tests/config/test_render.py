"""`dsh config show` output (SPEC §19): YAML with one provenance comment per leaf."""

from __future__ import annotations

from pathlib import Path

from ruamel.yaml import YAML

from dsh.loader.config import compose
from dsh.loader.config._render import render_yaml


def test_to_yaml_reads_back_as_the_composed_values(tmp_path: Path) -> None:
    (tmp_path / "over.yaml").write_text(
        'agent:\n  systemPrompt: "Line one: # not a comment\\nline two"\nmodel: {temperature: 0.2}\n',
        encoding="utf-8",
    )
    composed = compose(overlays=["over.yaml"], environ={}, cwd=tmp_path)
    loaded = YAML(typ="safe").load(composed.to_yaml())
    assert loaded == composed.to_json()["config"]
    assert loaded["agent"]["systemPrompt"] == "Line one: # not a comment\nline two"


def test_every_leaf_carries_its_source_as_a_comment(tmp_path: Path) -> None:
    composed = compose(profile="test", environ={"DSH_AGENT__MAX_STEPS_PER_TURN": "5"}, cwd=tmp_path)
    rows = composed.to_yaml().splitlines()
    leaves = [row for row in rows if not row.rstrip().endswith(":")]
    assert len(leaves) == len(composed.provenance)
    assert any(
        r.strip().startswith("maxStepsPerTurn: 5") and r.endswith("# env DSH_AGENT__MAX_STEPS_PER_TURN") for r in rows
    )
    assert any(r.strip().startswith("provider: replay") and r.endswith("# profiles/test.yaml:1") for r in rows)
    assert any(r.strip().startswith("maxTokens: null") and r.endswith("# default") for r in rows)


def test_to_json_holds_values_and_provenance(tmp_path: Path) -> None:
    data = compose(overlays=["quiet-reports"], environ={}, cwd=tmp_path).to_json()
    assert data["config"]["subagents"]["reportDelivery"] == "quiet"
    assert data["provenance"]["subagents.reportDelivery"] == "overlays/quiet-reports.yaml:1"
    assert data["fencesAllowed"] is False
    assert data["profile"].endswith("default.yaml")


def test_comments_align_in_one_column() -> None:
    text = render_yaml({"a": {"short": 1, "muchLongerKey": "x"}}, {"a.short": "f.yaml:1"})
    assert text == "a:\n  short: 1          # f.yaml:1\n  muchLongerKey: x  # default\n"


def test_strings_that_would_not_read_back_are_quoted() -> None:
    text = render_yaml({"a": "yes", "b": "x # y", "c": "", "d": "10", "e": "plain words"}, {})
    assert YAML(typ="safe").load(text) == {"a": "yes", "b": "x # y", "c": "", "d": "10", "e": "plain words"}
    assert "e: plain words" in text
