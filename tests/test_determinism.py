"""One transcript, one flow (issue 10, SPEC §26 item 1): every replay run of a transcript gives
byte-identical flow YAML, however loaded the machine is.

Under a transcript nothing external happens, so the interleaving of all agents is a function of the
transcript and the configuration alone: store I/O runs on the loop thread (no worker thread decides
when an awaiting task resumes), the write-behind timer is next-loop-iteration, and nothing orders by
wall-clock time or random ids. These tests run each transcript 50 times while two processes burn
both CPUs beside it; before that rule, the two-sibling transcript below gave 7 distinct flows in 30
idle runs.

Each run uses its own fresh home and its own event loop (the sync `dsh_flow` form), so nothing
carries over between runs but the code. `four-children-one-step` keeps its §23 item 87 id.

Shipped transcripts that wait for a person (`interrupt-demo` runs until `dsh interrupt` is typed in
another terminal) cannot run unattended; `test_every_shipped_transcript_is_classified` makes a new
shipped transcript pick a side.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from run_kit import SCENARIOS

from dsh.loader.shipped import available_names

RUNS = 50
UNATTENDED = ["hello", *SCENARIOS]
INTERACTIVE = {"interrupt-demo": "its child hangs until a person runs `dsh interrupt`"}
TWO_SIBLINGS = Path(__file__).parent / "replay" / "two-background-siblings.yaml"


@pytest.fixture(scope="module")
def cpu_burners() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two processes spinning beside the test (this machine has two cores), killed afterwards.

    They run at nice 19 so the 500 runs here fit the suite's time budget: the scheduler still
    preempts the test for them at every tick, and every idle moment is theirs. Full-priority load
    over 100 runs per transcript is measured with `dsh flow --repeat 100` (benchmarks/replay_load.sh)."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19))
             for _ in range(2)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def one_flow(dsh_flow: Any, transcript: str | Path, burners: list[subprocess.Popen[bytes]]) -> None:
    """`repeat=` raises `FlowsDiffer` (with the diff of the first two differing runs) on a mismatch."""
    flow = dsh_flow(transcript, repeat=RUNS)
    assert flow["violations"] == []
    assert all(p.poll() is None for p in burners), "a CPU burner died: the runs were not under load"


def test_every_shipped_transcript_is_classified() -> None:
    assert sorted(available_names("transcripts")) == sorted([*UNATTENDED, *INTERACTIVE])


@pytest.mark.parametrize("name", [
    pytest.param(name, id=f"m87-{name}" if name == "four-children-one-step" else name) for name in UNATTENDED
])
def test_shipped_transcript_gives_one_flow_over_50_runs_under_cpu_load(
    name: str, dsh_flow: Any, cpu_burners: list[subprocess.Popen[bytes]]
) -> None:
    one_flow(dsh_flow, name, cpu_burners)


def test_two_background_siblings_without_fences_give_one_flow_over_50_runs_under_cpu_load(
    dsh_flow: Any, cpu_burners: list[subprocess.Popen[bytes]]
) -> None:
    """Issue 10's case: alpha replies, beta reports then replies, both started in one root step, no
    fence. The default schedule decides; it decides the same way every time."""
    one_flow(dsh_flow, TWO_SIBLINGS, cpu_burners)
