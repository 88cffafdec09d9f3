"""Never-materialized session directories and their pruning (issue 9 item 2, `session/unmaterialized.py`).

A prune removes only directories that read as never materialized, never one a creation holds
locked, never through a symlink, never one holding files dsh did not write. A creation racing a
prune still publishes a complete session: the race is driven at each step of `create` through the
store's `create_step` seam, not by timing.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from dsh.loader.errors import SessionError
from dsh.loader.session import FileIO, SessionStore, is_unmaterialized, make_header, prune_unmaterialized, read
from dsh.loader.session._fileio import CREATE_STEPS, TEMP_PREFIX, CreateStep

from .helpers import line


def sessions(tmp_path: Path) -> Path:
    return tmp_path / "home" / "sessions"


def left_by_a_kill(root: Path, session_id: str, *, temp: bytes | None = None, empty_file: bool = False) -> Path:
    session_dir = root / session_id
    session_dir.mkdir(parents=True)
    if temp is not None:
        (session_dir / f"{TEMP_PREFIX}0123").write_bytes(temp)
    if empty_file:
        (session_dir / "session.jsonl").write_bytes(b"")
    return session_dir


def test_prune_removes_unmaterialized_dirs_and_keeps_sessions(tmp_path):
    root = sessions(tmp_path)
    a = left_by_a_kill(root, "session-a")
    b = left_by_a_kill(root, "session-b", temp=line(make_header("session-b")))
    c = left_by_a_kill(root, "session-c", empty_file=True)
    kept = root / "session-d" / "session.jsonl"
    kept.parent.mkdir()
    kept.write_bytes(line(make_header("session-d", created_at=1)))

    outcomes = prune_unmaterialized(root)

    assert [(o.path, o.action) for o in outcomes] == [(a, "removed"), (b, "removed"), (c, "removed")]
    assert sorted(os.listdir(root)) == ["session-d"]
    assert read(kept).header["id"] == "session-d"


def test_dry_run_reports_and_removes_nothing(tmp_path):
    root = sessions(tmp_path)
    a = left_by_a_kill(root, "session-a", temp=b"{")

    outcomes = prune_unmaterialized(root, dry_run=True)

    assert [(o.path, o.action) for o in outcomes] == [(a, "would-remove")]
    assert sorted(os.listdir(a)) == [f"{TEMP_PREFIX}0123"]


def test_a_locked_temp_file_is_a_creation_in_progress_and_is_kept(tmp_path):
    root = sessions(tmp_path)
    a = left_by_a_kill(root, "session-a", temp=b"")
    fd = os.open(a / f"{TEMP_PREFIX}0123", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        outcomes = prune_unmaterialized(root)
    finally:
        os.close(fd)

    assert [(o.path, o.action) for o in outcomes] == [(a, "kept-busy")]
    assert (a / f"{TEMP_PREFIX}0123").exists()


def test_prune_never_follows_a_symlinked_session_dir(tmp_path):
    root = sessions(tmp_path)
    root.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{TEMP_PREFIX}0123").write_bytes(b"precious")
    (root / "session-link").symlink_to(elsewhere, target_is_directory=True)

    assert prune_unmaterialized(root) == []
    assert (elsewhere / f"{TEMP_PREFIX}0123").read_bytes() == b"precious"
    assert not is_unmaterialized(root / "session-link")


@pytest.mark.parametrize("foreign", ["notes.txt", "link", "subdir"])
def test_a_dir_holding_what_dsh_did_not_write_is_kept(tmp_path, foreign):
    root = sessions(tmp_path)
    a = left_by_a_kill(root, "session-a")
    target = tmp_path / "target.txt"
    target.write_text("keep me")
    {"notes.txt": lambda p: p.write_text("mine"), "link": lambda p: p.symlink_to(target),
     "subdir": lambda p: p.mkdir()}[foreign](a / foreign)

    outcomes = prune_unmaterialized(root)

    assert [(o.path, o.action, o.detail) for o in outcomes] == [(a, "kept-foreign", foreign)]
    assert os.path.lexists(a / foreign) and target.read_text() == "keep me"


class PruneDuringCreate(FileIO):
    """Runs one prune of the whole sessions directory the first time `create` reaches `at`."""

    def __init__(self, root: Path, at: CreateStep) -> None:
        self.root, self.at = root, at
        self.pruned: list[str] = []
        self.done = False

    def create_step(self, step: CreateStep, directory: Path) -> None:
        if step == self.at and self.root.exists() and not self.done:
            self.done = True
            self.pruned += [f"{o.action}:{o.session_id}" for o in prune_unmaterialized(self.root)]


@pytest.mark.parametrize("step", CREATE_STEPS)
async def test_a_prune_racing_create_at_each_step_never_breaks_the_creation(tmp_path, step):
    """Before the temp file is locked a prune may remove the directory (create starts over); after,
    the lock keeps it. Either way create publishes a complete, locked session."""
    root = sessions(tmp_path)
    io = PruneDuringCreate(root, step)
    store = SessionStore(root.parent, batch_delay_ms=0, fsync=True, io=io)

    session = await store.create(make_header("session-c", created_at=7))
    try:
        assert read(store.path("session-c")).header == make_header("session-c", created_at=7)
        assert sorted(os.listdir(root / "session-c")) == ["session.jsonl"]
        with pytest.raises(SessionError) as info:
            await SessionStore(root.parent, fsync=False).load("session-c")
        assert info.value.code == "SESSION_BUSY"
    finally:
        await store.close(session)
    assert io.pruned == {
        "mkdir": [],  # nothing to prune yet
        "open-temp": ["removed:session-c"],  # the empty directory goes; create starts over
        "write-header": ["kept-busy:session-c"],  # from here the temp file is ours and locked
        "fsync-temp": ["kept-busy:session-c"],
        "link": ["kept-busy:session-c"],
        "unlink-temp": [],  # published: no longer unmaterialized
        "fsync-dir": [],
    }[step]


class PlantDuringCreate(FileIO):
    """Writes a foreign `session.jsonl` into the session directory the first time `create` reaches `at`."""

    def __init__(self, at: CreateStep) -> None:
        self.at, self.done = at, False

    def create_step(self, step: CreateStep, directory: Path) -> None:
        if step == self.at and not self.done:
            self.done = True
            (directory / "session.jsonl").write_bytes(line({"type": "session", "foreign": True}))


@pytest.mark.parametrize("step", ["open-temp", "write-header", "link"])
async def test_a_name_planted_in_a_fresh_directory_before_the_link_is_session_exists(tmp_path, step):
    """Issue 13: a directory the creation just made is not checked for `session.jsonl` again (one
    `lstat` per child); a file someone put there before the link must still fail the creation with
    SESSION_EXISTS (the link's EEXIST), keep the planted file, and leave no temp file behind."""
    root = sessions(tmp_path)
    store = SessionStore(root.parent, batch_delay_ms=0, fsync=True, io=PlantDuringCreate(step))

    with pytest.raises(SessionError) as info:
        await store.create(make_header("session-p", created_at=7))

    assert info.value.code == "SESSION_EXISTS"
    assert os.listdir(root / "session-p") == ["session.jsonl"]
    assert b'"foreign":true' in (root / "session-p" / "session.jsonl").read_bytes()
    assert not store.is_live("session-p")


async def test_creating_under_a_missing_sessions_directory_makes_it_and_home_0700(tmp_path):
    """`_make_dir` tries the session's `mkdir` first and makes missing ancestors only on ENOENT."""
    home = tmp_path / "new-home"
    store = SessionStore(home, batch_delay_ms=0, fsync=False)
    session = await store.create(make_header("session-m", created_at=7))
    await store.close(session)
    for d in (home, home / "sessions", home / "sessions" / "session-m"):
        assert d.stat().st_mode & 0o777 == 0o700
    assert read(store.path("session-m")).header == make_header("session-m", created_at=7)
