"""The shipped-file table (`loader/shipped_parsed.json`, issue 13): a shipped profile, overlay or
transcript reads without ruamel, as exactly what the marked loader reads in it, and any other text
(an edited copy, a user's file) still goes through the marked loader with its refusals and positions.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.config import compose
from dsh.loader.errors import ConfigError, TranscriptError
from dsh.loader.transcripts import load_transcript
from dsh.loader.yamlpos import SHIPPED_TABLE, YamlProblem, load_yaml_with_marks, locate, plain, read_yaml, shipped_table_entry

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p for kind in ("profiles", "overlays", "transcripts") for p in (ROOT / kind).glob("*.yaml"))


def same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (`True == 1` would hide a bool read as an int)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def test_the_table_is_current():
    """Edit a shipped file and this fails until `python scripts/shipped_parsed.py` rewrites the table."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "shipped_parsed.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    assert SHIPPED_TABLE.parent == ROOT / "loader"
    assert len(json.loads(SHIPPED_TABLE.read_text(encoding="utf-8"))["documents"]) == len(SHIPPED)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_shipped_file_reads_from_the_table_as_the_marked_loader_reads_it(path):
    document = read_yaml(path)

    assert document._has_marked is False  # no ruamel parse
    assert same(document.data, plain(load_yaml_with_marks(path)))
    assert same(document.marked(), load_yaml_with_marks(path))  # positions, on demand


def test_each_read_gets_its_own_objects(tmp_path):
    path = ROOT / "profiles" / "test.yaml"
    first = read_yaml(path).data
    first["model"]["provider"] = "changed"

    assert read_yaml(path).data["model"]["provider"] == "replay"


def test_an_edited_copy_reads_through_the_marked_loader(tmp_path):
    text = (ROOT / "transcripts" / "hello.yaml").read_text(encoding="utf-8")
    path = tmp_path / "hello.yaml"
    path.write_text(text + "# one more line\n", encoding="utf-8")

    document = read_yaml(path)

    assert document._has_marked is True
    assert same(document.data, plain(load_yaml_with_marks(ROOT / "transcripts" / "hello.yaml")))


def test_an_exact_copy_elsewhere_reports_its_errors_at_their_position(tmp_path):
    """The table decides by text, not by path; a copy that the schema refuses still gets
    `file:line:col` (the marked tree is composed for the error)."""
    text = (ROOT / "profiles" / "test.yaml").read_text(encoding="utf-8")
    (tmp_path / "p.yaml").write_text(text, encoding="utf-8")
    assert read_yaml(tmp_path / "p.yaml")._has_marked is False
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("fsync: false", "fsync: sometimes"), encoding="utf-8")

    with pytest.raises(ConfigError) as refused:
        compose(profile=str(bad), overlays=[], transcript=None, flags=[])
    line = next(i for i, l in enumerate(text.splitlines(), 1) if "fsync" in l)
    assert f"{bad}:{line}:" in refused.value.message


def test_a_shipped_transcript_refused_by_the_schema_elsewhere_points_at_the_key(tmp_path):
    text = (ROOT / "transcripts" / "hello.yaml").read_text(encoding="utf-8")
    path = tmp_path / "t.yaml"
    path.write_text(text.replace("version: 1", "version: 2"), encoding="utf-8")

    with pytest.raises(TranscriptError) as refused:
        load_transcript(path)
    assert refused.value.message.startswith(f"{path}:1:1: version")


def test_the_table_cannot_hold_what_the_marked_loader_refuses(tmp_path):
    path = tmp_path / "alias.yaml"
    path.write_text("a: &x 1\nb: *x\n", encoding="utf-8")
    with pytest.raises(YamlProblem, match="anchors are not supported"):
        shipped_table_entry(path)
    keyed = tmp_path / "int-key.yaml"
    keyed.write_text("1: one\n", encoding="utf-8")
    with pytest.raises(ValueError, match="does not survive JSON"):
        shipped_table_entry(keyed)


def test_the_shipped_profile_still_gives_each_leaf_its_line():
    """Provenance (`dsh config show`) still has each leaf's line, from the marked tree composed on
    first use, although the profile itself was read from the table."""
    composed = compose(profile=None, overlays=[], transcript=load_transcript("hello"), flags=[])
    text = (ROOT / "profiles" / "test.yaml").read_text(encoding="utf-8").splitlines()
    where = composed.provenance["persistence.fsync"]
    label, line = where.rsplit(":", 1)

    assert label.endswith("test.yaml")
    assert "fsync" in text[int(line) - 1]
