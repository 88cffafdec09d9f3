"""Issue 15 item 2 (and item 7's custom tags and `/dev/null`): one YAML loader for profiles, overlays
and transcripts refuses anchors, aliases, explicit tags, deep nesting, huge integers, oversize files
and anything that is not a regular file, with one located line on stderr and exit 2. The position is
the first offending token (the bomb's first anchor, `:1:4`), so nothing after it was composed or
expanded; what a refusal costs is measured by `scripts/fuzz.sh`, never asserted as a time here.

Each case is run through the real `dsh` command in-process, for each of the three places a YAML
file enters: `--profile`, `--overlay` and `--transcript`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

# 254 bytes; expanded, the last key holds 9**7 (4.8 million) strings.
ALIAS_BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['x'] * 9)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e"], ["a", "b", "c", "d", "e", "f"])
) + "g: [*f, *f, *f, *f, *f, *f, *f, *f, *f]\n"

CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "alias-bomb": (lambda p: p.write_text(ALIAS_BOMB), ":1:4: anchors are not supported (found &a)"),
    "alias": (lambda p: p.write_text("model: *x\n"), ":1:8: aliases are not supported (found *x)"),
    "custom-tag": (lambda p: p.write_text("model: !foo\n  model: x\n"), ":1:8: explicit tags are not supported (found !foo)"),
    "core-tag": (lambda p: p.write_text("model:\n  model: !!str x\n"), ":2:10: explicit tags are not supported"),
    "nested-150-flow": (lambda p: p.write_text("model: " + "[" * 150 + "]" * 150 + "\n"), ": nested deeper than 64 levels"),
    "nested-150-block": (
        lambda p: p.write_text("".join("  " * i + f"k{i}:\n" for i in range(150)) + "  " * 150 + "x: 1\n"),
        ": nested deeper than 64 levels",
    ),
    "int-5000-digits": (lambda p: p.write_text("model:\n  maxTokens: " + "9" * 5000 + "\n"), ":2:14: integer longer than 64 digits"),
    "fifo": (lambda p: os.mkfifo(p), ": is a FIFO, not a regular file; refusing to read it"),
    "symlink": (lambda p: p.symlink_to(p.with_name("target.yaml")), ": is a symbolic link; give the path of the file itself"),
    "directory": (lambda p: p.mkdir(), ": is a directory, not a regular file; refusing to read it"),
}


def _surface_args(surface: str, path: Path) -> list[str | Path]:
    if surface == "profile":
        return ["config", "show", "--profile", path]
    if surface == "overlay":
        return ["config", "show", "--overlay", path]
    return ["config", "show", "--transcript", path]


@pytest.mark.parametrize("surface", ["profile", "overlay", "transcript"])
@pytest.mark.parametrize("case", list(CASES))
def test_hostile_yaml_is_one_located_line_exit_2_in_milliseconds(dsh, tmp_path, surface, case):
    (tmp_path / "target.yaml").write_text("model:\n  model: x\n")
    path = tmp_path / "input.yaml"
    make, expected = CASES[case]
    make(path)

    result = dsh(*_surface_args(surface, path))

    assert result.exit_code == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(f"dsh: {path}")
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_run_refuses_an_alias_bomb_transcript_before_anything_runs(dsh, tmp_path, home):
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)

    result = dsh("run", "--transcript", bomb, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == f"dsh: {bomb}:1:4: anchors are not supported (found &a)\n"
    assert not home.exists()


def test_dev_null_as_overlay_is_named_for_what_it_is(dsh):
    """Issue 15 item 7: it used to read "no such file"."""
    result = dsh("config", "show", "--overlay", "/dev/null")

    assert result.exit_code == 2
    assert result.stderr == "dsh: /dev/null: is a character device, not a regular file; refusing to read it\n"


def test_a_missing_overlay_is_still_no_such_file(dsh, tmp_path):
    result = dsh("config", "show", "--overlay", tmp_path / "absent.yaml")

    assert (result.exit_code, result.stderr) == (2, f"dsh: {tmp_path / 'absent.yaml'}: no such file\n")


def test_size_limit_defaults_to_8_mib_and_is_set_by_dsh_max_input_bytes(dsh, tmp_path):
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (8 * 1024 * 1024 // 10 + 1))  # just over 8 MiB of comments
    small = tmp_path / "small.yaml"
    small.write_text("model:\n  model: x\n")

    default = dsh("config", "show", "--overlay", big)
    lowered = dsh("config", "show", "--profile", "default", "--overlay", small, env={"DSH_MAX_INPUT_BYTES": "16"})
    raised = dsh("config", "show", "--overlay", small, env={"DSH_MAX_INPUT_BYTES": "100000"})
    bad = dsh("config", "show", "--overlay", small, env={"DSH_MAX_INPUT_BYTES": "lots"})

    assert default.exit_code == 2
    assert default.stderr.startswith(f"dsh: {big}: is larger than the input limit of 8388608 bytes")
    assert lowered.exit_code == 2
    assert lowered.stderr.startswith("dsh: profiles/default.yaml: is larger than the input limit of 16 bytes")
    assert raised.exit_code == 0, raised.stderr
    assert bad.exit_code == 2
    assert "environment DSH_MAX_INPUT_BYTES: expected a positive number of bytes, got 'lots'" in bad.stderr


def test_plain_yaml_with_64_levels_and_64_digit_integers_still_loads(dsh, tmp_path):
    """The limits are limits, not a ban: the boundary values pass the loader (and reach the schema)."""
    deep = tmp_path / "deep.yaml"
    deep.write_text("model:\n  maxTokens: " + "1" * 64 + "\n" + "extra: " + "[" * 63 + "]" * 63 + "\n")

    result = dsh("config", "show", "--overlay", deep)

    assert result.exit_code == 2
    assert "nested deeper" not in result.stderr and "integer longer" not in result.stderr
    assert ": extra: unknown key" in result.stderr


@pytest.mark.parametrize("value", ["2001-13-45", "2001-12-14 25:61:61", "2001-02-30"])
def test_an_impossible_date_is_a_bad_value_at_its_key_not_a_traceback(dsh, tmp_path, value):
    """Found by the 10,000-case fuzz run: the round-trip constructor raised ValueError on these."""
    overlay = tmp_path / "date.yaml"
    overlay.write_text(f"model:\n  maxTokens: {value}\n")

    result = dsh("config", "show", "--overlay", overlay)

    assert result.exit_code == 2
    assert result.stderr.startswith(f"dsh: {overlay}:2:3: model.maxTokens: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
