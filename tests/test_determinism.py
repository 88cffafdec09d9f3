"""Every shipped transcript gives byte-identical flow YAML over 20 runs (SPEC §20.2).

Each run uses its own fresh home and its own event loop (the sync `dsh_flow` form), so nothing
carries over between runs but the code. The fences of §21 order every settlement race; a transcript
whose flow varied here would have an unfenced race (or the runtime a nondeterminism) that a
snapshot would catch only now and then.

`four-children-one-step` is §23 item 87's second half: with holds ordering the four settlements,
the flows are identical over 20 runs. (The first half, binding by `spawnedBy` whichever sibling
requests first, is a binding unit test.)

Shipped transcripts that wait for a person (`interrupt-demo` runs until `dsh interrupt` is typed in
another terminal) cannot run unattended; `test_every_shipped_transcript_is_classified` makes a new
shipped transcript pick a side.

20 runs of each of the eight unattended transcripts take about 4 s on a 2-core machine.
"""

from __future__ import annotations

from typing import Any

import pytest
from run_kit import SCENARIOS

from loader.shipped import available_names

RUNS = 20
UNATTENDED = ["hello", *SCENARIOS]
INTERACTIVE = {"interrupt-demo": "its child hangs until a person runs `dsh interrupt`"}


def test_every_shipped_transcript_is_classified() -> None:
    assert sorted(available_names("transcripts")) == sorted([*UNATTENDED, *INTERACTIVE])


@pytest.mark.parametrize("name", [
    pytest.param(name, id=f"m87-{name}" if name == "four-children-one-step" else name) for name in UNATTENDED
])
def test_shipped_transcript_flow_is_byte_identical_over_20_runs(name: str, dsh_flow: Any) -> None:
    texts = [dsh_flow(name).yaml for _ in range(RUNS)]
    assert len(texts) == RUNS
    assert len(set(texts)) == 1, f"{name}: {len(set(texts))} distinct flows in {RUNS} runs"
