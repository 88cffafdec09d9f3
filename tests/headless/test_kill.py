"""The kill test (issue 9 item 6(b)): at least 30 seeded SIGKILLs of `dsh run` of a fan-out with
follow-ups, each followed by loading every session and one `dsh run --resume <root> --transcript`
to completion; the invariants are those of `scripts/killloop.py` (its docstring lists them).

Each run is a child forked by a pre-imported fork server (`scripts/forkrun.py`): a real `dsh`
process and a real SIGKILL, without an interpreter start-up per run. The kill moment is the seeded random input (after the k-th NDJSON record the run prints), not a
race the test tries to win; every end is detected by process exit. `scripts/killloop.py N` runs the
same loop for any N and prints the counts.
"""

from __future__ import annotations

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
