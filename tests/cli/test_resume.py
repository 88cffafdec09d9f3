"""`dsh run --resume` after a crash (issue 9 item 5): a child session is refused with exit 2 naming
the root to resume, and a transcript continues a tree keylessly, so recovery is testable without a key.

(Run in-process through `CliRunner`; the logs are hand-made in the state a crash leaves.)
"""

from __future__ import annotations

import sys
from pathlib import Path

from cli_kit import clean_env, transcript

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from crash_kit import CHILD, GRANDCHILD, ROOT, Log, assistant, entered_ids, events_of, notice_id, user, write  # noqa: E402

SPAWN = {"id": "c1", "name": "subagent", "arguments": {"label": "w", "prompt": "do W"}}


def _crashed_tree(home: Path) -> None:
    """The root spawned `w` and ended STARTED; `w` finished W_DONE; the crash came before the notice."""
    root = Log().insert(user("task", "go"))
    root.answered_turn(user("task", "go"), assistant("a1", calls=[SPAWN]), assistant("a2", "STARTED"))
    child = Log().descriptor("w", "c1").epoch(1).insert(user("p1", "do W"))
    child.answered_turn(user("p1", "do W"), assistant("w1", "W_DONE"))
    write(home, ROOT, root)
    write(home, CHILD, child, parent=ROOT, depth=1)


def test_resume_of_a_child_session_exits_2_and_names_the_root_to_resume(dsh, home: Path) -> None:
    _crashed_tree(home)
    grandchild = Log().descriptor("g", "g1").epoch(1)
    write(home, GRANDCHILD, grandchild, parent=CHILD, depth=2)
    before = {p: p.read_bytes() for p in (home / "sessions").glob("*/session.jsonl")}

    result = dsh("run", "--resume", GRANDCHILD, "--home", str(home), env=clean_env())

    assert result.exit_code == 2
    assert result.stdout == ""
    assert f"dsh run --resume {ROOT}" in result.stderr and GRANDCHILD in result.stderr, result.stderr
    assert {p: p.read_bytes() for p in before} == before  # refused before anything was locked or repaired


def test_resume_with_a_transcript_finishes_the_tree_keylessly(dsh, home: Path, tmp_path: Path) -> None:
    _crashed_tree(home)
    script = transcript(tmp_path, "resume-w", {
        "root": {"replies": [{"toolCalls": [SPAWN]}, {"text": "STARTED"}, {"text": "NOTED"}]},
        "w": {"spawnedBy": "c1", "replies": [{"text": "W_DONE"}]},
    })

    result = dsh("run", "--resume", ROOT, "--transcript", str(script), "--home", str(home), env=clean_env())

    assert (result.exit_code, result.stdout) == (0, "NOTED\n"), result.stderr
    root_events = events_of(home, ROOT)
    assert entered_ids(root_events).count(notice_id(CHILD, 1)) == 1
    assert "task" in entered_ids(root_events) and entered_ids(root_events).count("task") == 1  # task not re-sent


def test_resume_of_a_root_killed_before_its_task_was_durable_sends_the_transcripts_task(
    dsh, home: Path, tmp_path: Path
) -> None:
    """A kill right after the root's header: nothing was accepted, so the resumed transcript run
    sends the transcript's task (once) and finishes as the first run would have."""
    write(home, ROOT, Log())
    script = transcript(tmp_path, "resume-hello", {"root": {"replies": [{"text": "HELLO"}]}}, task="say hello")

    result = dsh("run", "--resume", ROOT, "--transcript", str(script), "--home", str(home), env=clean_env())

    assert (result.exit_code, result.stdout) == (0, "HELLO\n"), result.stderr
    tasks = [e["data"]["content"][0]["text"] for e in events_of(home, ROOT) if e["type"] == "user/message"]
    assert tasks == ["say hello"]


def test_resume_of_a_missing_session_exits_2_with_the_unknown_session_message(dsh, home: Path) -> None:
    """Issue 15 finding 7: a missing id is a usage error naming the id and the home, not exit 1 with
    a raw path; nothing is created under the home."""
    from dsh.loader.texts import render

    _crashed_tree(home)
    before = sorted(p.name for p in (home / "sessions").iterdir())

    result = dsh("run", "--resume", "sess-missing", "--home", str(home), env=clean_env())

    assert (result.exit_code, result.stdout) == (2, ""), result.stderr
    assert result.stderr == "dsh: " + render("T-CLI-UNKNOWN-SESSION", id="sess-missing", home=home) + "\n"
    assert sorted(p.name for p in (home / "sessions").iterdir()) == before
