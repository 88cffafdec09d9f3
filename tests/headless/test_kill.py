"""The kill test (issue 9 item 6(b)): at least 30 seeded SIGKILLs of `dsh run` of a fan-out with
follow-ups, each followed by loading every session and one `dsh run --resume <root> --transcript`
to completion; the invariants are those of `scripts/killloop.py` (its docstring lists them).

Each run is a child forked by a pre-imported fork server (`scripts/forkrun.py`): a real `dsh`
process and a real SIGKILL, without an interpreter start-up per run. The kill moment is the seeded random input (after the k-th NDJSON record the run prints), not a
race the test tries to win; every end is detected by process exit. `scripts/killloop.py N` runs the
same loop for any N and prints the counts.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import killloop  # noqa: E402

KILLS = 30
MAX_TRIALS = 45  # seeds whose run ended before its moment are not kills; more seeds make up for them
JOBS = 2  # trials side by side, each on its own fork server (a run waits on its batch timer part of the time)


def test_seeded_kills_then_one_resume_keep_every_crash_invariant(tmp_path: Path) -> None:
    with killloop.KillLoop(jobs=JOBS, workdir=tmp_path) as loop:
        trials = loop.trials(range(KILLS))
        seed = KILLS
        while sum(t.outcome != "finished" for t in trials) < KILLS and seed < MAX_TRIALS:
            trials += loop.trials([seed])
            seed += 1
    out = killloop.summary(trials)
    notes = "\n".join(f"seed {t.seed} (record {t.moment}): {n}" for t in trials for n in t.notes)
    assert out["kills"] >= KILLS, out
    assert out["resumes"] >= KILLS - out["killed_before_root"], out
    anomalies = out["anomalies"]
    for name in ("unloadable", "claimed_missing", "entered_twice", "notice_count", "final_answer", "resume_failed"):
        assert anomalies[name] == 0, f"{name}: {out}\n{notes}"


def test_a_kill_between_the_roots_reply_and_its_spawn_calls_is_a_scripted_divergence(tmp_path: Path) -> None:
    """A hand-made crash window, the one seeds 43, 104 and 113 hit now and then: the root's reply
    asking for its `subagent` calls is durable, no `tool/call` of it is. The resume's repair closes
    each call with an unknown outcome, so no child is ever born and the script's next root reply
    cannot address one (REPLAY_PLACEHOLDER): the scripted divergence, not a lost final answer."""
    home = tmp_path / "home"
    with killloop.fork_servers(1) as pool:
        server = pool.get()
        finished = server.run([*killloop._run_args(home), "--json"], capture=True)
        # Exit 1 is REPLAY_UNCONSUMED: the script keeps spare replies for the resumes (`measure`).
        assert json.loads(finished["stdout"].splitlines()[-1]).get("output") == killloop.FINAL_ANSWER, finished
        root = killloop.find_root(home)
        assert root is not None
        for directory in (home / "sessions").iterdir():
            if directory.name != root:
                shutil.rmtree(directory)
        log = home / "sessions" / root / "session.jsonl"
        lines = log.read_bytes().splitlines(keepends=True)
        reply = next(i for i, line in enumerate(lines) if json.loads(line).get("type") == "assistant/message")
        log.write_bytes(b"".join(lines[: reply + 1]))
        resume = server.run([*killloop._run_args(home), "--resume", root], capture=True)
    t = killloop.Trial(seed=-1, moment=0)
    killloop.check_resume(t, resume["code"], resume["stderr"])
    killloop.check_logs(t, home, root)
    events = [json.loads(line) for line in log.read_bytes().splitlines()[1:]]
    assert not [e for e in events if e["type"] == "tool/call"]  # the window: the calls' events never landed
    assert t.placeholder_failed, resume["stderr"]
    assert t.divergent, t
    assert sum(t.anomalies.values()) == 0, (t.anomalies, t.notes)


def test_a_run_that_printed_every_record_and_exited_before_its_kill_is_an_end_not_a_failure() -> None:
    """The fork server reads the run's stdout in chunks: the chunk holding the kill's record can
    hold the run's last one, and the run may have exited (1: the spare replies) before the kill
    landed. Seen under load with seed 23 (record 400 of 467). Any other exit stays a failure."""
    assert killloop.ended_first({"code": 1, "seen": 467}, 400, 467)
    assert killloop.ended_first({"code": 0, "seen": 467}, 467, 467)
    assert killloop.ended_first({"code": 1, "seen": 12}, 400, 467)  # closed stdout before its moment
    assert not killloop.ended_first({"code": -9, "seen": 467}, 400, 467)
    with pytest.raises(SystemExit, match="exited 1 after 430"):
        killloop.ended_first({"code": 1, "seen": 430}, 400, 467)  # a run failing mid-way
    with pytest.raises(SystemExit, match="exited 2"):
        killloop.ended_first({"code": 2, "seen": 467}, 400, 467)
