"""Hostile sessions through the `dsh` commands (issue 15 items 1, 3, 4), in-process.

One bad session reads `corrupt` in `dsh sessions list` while the others list normally; `show` of
it is one line; `--resume` of it is `SESSION_CORRUPT` and the file keeps its checksum; a FIFO in
place of a session file neither hangs `list` nor `--resume`; an untrusted home directory makes a
writing command refuse in one line naming the fix, exit 2, while read-only commands still work.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from cli_kit import clean_env

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "session"))
from hostile_kit import good_events, sha, write_session  # noqa: E402

TRACEBACK = "Traceback (most recent call last)"
KEYED = clean_env({"DEEPSEEK_API_KEY": "unused-the-load-fails-first"})


@pytest.fixture
def h(tmp_path: Path) -> Path:
    """A home of its own (not the suite's `home`, whose teardown validates every log: these are bad)."""
    return tmp_path / "h"


def _corrupt(index: int, data: dict) -> list[dict]:
    events = good_events()
    events[index]["data"] = data
    return events


def test_a_string_reason_reads_corrupt_in_list_and_the_other_sessions_are_fine(dsh, h: Path) -> None:
    write_session(h, session_id="s-good")
    write_session(h, _corrupt(9, {"turn": 1, "reason": "completed"}), session_id="s-bad")

    result = dsh("sessions", "list", "--home", str(h), env=clean_env())

    assert result.exit_code == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]  # under the header
    assert [r[2] for r in rows if r[0] == "s-bad"] == ["corrupt"]
    good = [r for r in rows if r[0] == "s-good"]
    assert len(good) == 1 and good[0][2:5] == ["saved", "completed", "1"]
    assert TRACEBACK not in result.stderr


def test_string_content_makes_show_one_line(dsh, h: Path) -> None:
    path = write_session(h, _corrupt(4, {"id": "m1", "role": "user", "content": "go"}))

    result = dsh("sessions", "show", "s-hostile", "--home", str(h), env=clean_env())

    assert (result.exit_code, result.stdout) == (1, "")  # SPEC §22: a corrupt log is exit 1
    assert result.stderr.count("\n") == 1 and TRACEBACK not in result.stderr
    assert f"{path}:6: data.content" in result.stderr and "[SESSION_CORRUPT]" in result.stderr


@pytest.mark.parametrize(("index", "data", "field"), [
    pytest.param(0, {"target": "next-turn", "start": 0, "inserted": [{"role": "user", "content": []}]},
                 "data.inserted[0].id", id="splice-inserted-without-id"),
    pytest.param(6, {"turn": 1, "step": 1, "callId": ["c1"], "name": "echo"}, "data.callId", id="list-call-id"),
])
def test_resume_of_a_bad_line_is_session_corrupt_and_the_file_is_unchanged(
    dsh, h: Path, index: int, data: dict, field: str
) -> None:
    events = _corrupt(index, data)[:8]  # the turn is open: a load that got further would append closers
    path = write_session(h, events)
    before = sha(path)

    result = dsh("run", "--resume", "s-hostile", "--home", str(h), env=KEYED)

    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "[SESSION_CORRUPT]" in result.stderr and field in result.stderr, result.stderr
    assert TRACEBACK not in result.stderr and TRACEBACK not in result.stdout
    assert sha(path) == before


def test_a_fifo_session_file_hangs_neither_list_nor_resume(dsh, h: Path) -> None:
    write_session(h, session_id="s-good")
    fifo = write_session(h, session_id="s-fifo")
    fifo.unlink()
    os.mkfifo(fifo)

    listed = dsh("sessions", "list", "--home", str(h), env=clean_env())
    resumed = dsh("run", "--resume", "s-fifo", "--home", str(h), env=KEYED)

    assert listed.exit_code == 0 and any(r.startswith("s-good") for r in listed.stdout.splitlines())
    assert resumed.exit_code == 2 and "a FIFO" in resumed.stderr, resumed.stderr
    assert TRACEBACK not in listed.stderr + resumed.stderr


@pytest.mark.parametrize("which", ["h", "h/sessions", "h/run", "h/sessions/s-hostile"])
def test_a_writing_command_refuses_an_untrusted_directory_in_one_line_and_reads_still_work(
    dsh, tmp_path: Path, h: Path, which: str
) -> None:
    path = write_session(h, good_events()[:5])
    (h / "run").mkdir(mode=0o700, exist_ok=True)
    target = tmp_path / which
    target.chmod(0o775)
    before = sha(path)

    refused = dsh("run", "--resume", "s-hostile", "--home", str(h), env=KEYED)
    listed = dsh("sessions", "list", "--home", str(h), env=clean_env())

    assert refused.exit_code == 2, refused.stderr
    assert refused.stderr == f"dsh: {target} is group- or world-writable; fix: chmod 700 {target}\n"
    assert sha(path) == before
    assert listed.exit_code == 0 and listed.stdout.splitlines()[1].startswith("s-hostile"), listed.stderr


def test_a_home_owned_by_another_user_is_refused_naming_the_fix(dsh, h: Path) -> None:
    write_session(h)
    os.chown(h, 4242, -1)

    result = dsh("run", "--resume", "s-hostile", "--home", str(h), env=KEYED)

    assert result.exit_code == 2
    assert result.stderr == f"dsh: {h} is owned by uid 4242, not by you (uid {os.getuid()}); fix: chown {os.getuid()} {h}\n"
