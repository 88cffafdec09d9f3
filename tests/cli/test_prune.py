"""`dsh sessions prune --older-than AGE` (issue 11 item 4), through the CLI.

Whole trees go, all or nothing, when every session in them was last active before the cutoff; a
tree whose run is live, or with a session some process holds locked, is kept and reported; a
directory holding a file dsh did not write keeps its tree. Ages are made by moving a finished
tree's times back (its header `createdAt` and every event `time`), never by waiting.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
from pathlib import Path

import pytest
from cli_kit import start_hanging_child

from dsh.loader.texts import render

DAY_MS = 86_400_000


def run_tree(dsh, home: Path, name: str = "background-settlement") -> list[str]:
    before = set(os.listdir(home / "sessions")) if (home / "sessions").is_dir() else set()
    assert dsh("run", "--transcript", name, "--home", home).exit_code == 0
    made = sorted(set(os.listdir(home / "sessions")) - before)
    root = next(s for s in made if "parentSession" not in json.loads(_path(home, s).read_bytes().split(b"\n")[0]))
    return [root, *(s for s in made if s != root)]


def _path(home: Path, sid: str) -> Path:
    return home / "sessions" / sid / "session.jsonl"


def age(home: Path, ids: list[str], days: int) -> None:
    """Move every time of these sessions `days` back, as if they had run then."""
    for sid in ids:
        header, *events = [json.loads(line) for line in _path(home, sid).read_text().splitlines()]
        header["createdAt"] -= days * DAY_MS
        for e in events:
            e["time"] -= days * DAY_MS
        _path(home, sid).write_text("".join(json.dumps(x, separators=(",", ":")) + "\n" for x in [header, *events]))


def dirs(home: Path, ids: list[str]) -> list[Path]:
    return [home / "sessions" / sid for sid in ids]


def test_older_than_removes_whole_old_trees_and_dry_run_removes_nothing(dsh, home):
    old, fresh = run_tree(dsh, home), run_tree(dsh, home, "hello")
    age(home, old, 8)
    fresh_bytes = _path(home, fresh[0]).read_bytes()

    dry = dsh("sessions", "prune", "--older-than", "7d", "--dry-run", "--home", home)
    assert (dry.exit_code, dry.stderr) == (0, "")
    # (In creation order; a root and its child made in the same millisecond come by id: compared as sets.)
    assert sorted(dry.stdout.splitlines()) == sorted(render("T-CLI-PRUNE-WOULD-REMOVE", path=p) for p in dirs(home, old))
    assert all(p.is_dir() for p in dirs(home, old))

    result = dsh("sessions", "prune", "--older-than", "7d", "--home", home)
    assert (result.exit_code, result.stderr) == (0, "")
    assert sorted(result.stdout.splitlines()) == sorted(render("T-CLI-PRUNE-REMOVED", path=p) for p in dirs(home, old))
    assert sorted(os.listdir(home / "sessions")) == fresh
    assert _path(home, fresh[0]).read_bytes() == fresh_bytes

    again = dsh("sessions", "prune", "--older-than", "7d", "--home", home)
    assert (again.exit_code, again.stdout) == (0, "")
    assert again.stderr == render("T-CLI-PRUNE-NONE-OLD", age="7d", home=home) + "\n"


def test_a_tree_with_one_recent_session_is_kept_whole(dsh, home):
    root, child = run_tree(dsh, home)
    age(home, [root], 8)  # the child was active since

    result = dsh("sessions", "prune", "--older-than", "7d", "--home", home)

    assert (result.exit_code, result.stdout) == (0, "")
    assert all(p.is_dir() for p in dirs(home, [root, child]))


def test_a_locked_session_keeps_its_whole_tree(dsh, home):
    """A live store holds the flock on its file (§5.4); prune must not take the tree from under it."""
    tree = run_tree(dsh, home)
    age(home, tree, 8)
    before = {sid: _path(home, sid).read_bytes() for sid in tree}
    fd = os.open(_path(home, tree[1]), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        result = dsh("sessions", "prune", "--older-than", "7d", "--home", home)
    finally:
        os.close(fd)

    assert (result.exit_code, result.stdout) == (0, "")
    assert sorted(result.stderr.splitlines()) == sorted(render("T-CLI-PRUNE-KEPT-LIVE", path=p) for p in dirs(home, tree))
    assert {sid: _path(home, sid).read_bytes() for sid in tree} == before


def test_a_live_runs_tree_is_never_pruned(dsh, live_run, home, tmp_path):
    done = run_tree(dsh, home)
    run, root, child = start_hanging_child(live_run, home, tmp_path)

    result = dsh("sessions", "prune", "--older-than", "0s", "--home", home)  # every tree is old enough

    assert result.exit_code == 0
    assert sorted(result.stdout.splitlines()) == sorted(render("T-CLI-PRUNE-REMOVED", path=p) for p in dirs(home, done))
    assert sorted(result.stderr.splitlines()) == sorted(render("T-CLI-PRUNE-KEPT-LIVE", path=p) for p in dirs(home, [root, child]))
    run.signal(signal.SIGINT)
    assert run.finish() == 130
    assert all(_path(home, sid).is_file() for sid in (root, child))


def test_a_foreign_file_keeps_its_tree_and_is_named(dsh, home):
    tree = run_tree(dsh, home)
    age(home, tree, 8)
    (home / "sessions" / tree[1] / "notes.txt").write_text("mine")

    result = dsh("sessions", "prune", "--older-than", "7d", "--home", home)

    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == render("T-CLI-PRUNE-KEPT-FOREIGN", path=home / "sessions" / tree[1], name="notes.txt") + "\n"
    assert all(p.is_dir() for p in dirs(home, tree))
    (home / "sessions" / tree[1] / "notes.txt").unlink()


@pytest.mark.parametrize("value", ["7", "7x", "d", "-1d", "1.5h", ""])
def test_a_bad_age_exits_2_and_removes_nothing(dsh, home, value):
    tree = run_tree(dsh, home)
    age(home, tree, 8)

    result = dsh("sessions", "prune", "--older-than", value, "--home", home)

    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == "dsh: " + render("T-CLI-BAD-AGE", value=value) + "\n"
    assert all(p.is_dir() for p in dirs(home, tree))


def test_older_than_and_unmaterialized_combine(dsh, home):
    tree = run_tree(dsh, home)
    age(home, tree, 8)
    stray = home / "sessions" / "session-22222222-2222-4222-8222-222222222222"
    stray.mkdir()

    result = dsh("sessions", "prune", "--unmaterialized", "--older-than", "7d", "--home", home)

    assert (result.exit_code, result.stderr) == (0, "")
    assert sorted(result.stdout.splitlines()) == sorted(render("T-CLI-PRUNE-REMOVED", path=p) for p in [stray, *dirs(home, tree)])
    assert os.listdir(home / "sessions") == []
