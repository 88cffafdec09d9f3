"""Recordings of runs whose turns end by no model's word replay (issue 12 "Not yet" item 4; SPEC
§15.5, §16): interrupts and failed checkpoints (loader/models/stop_fences.py).

The shipped transcript is served by its `ReplayProvider` (its fences and hangs stay the replay's)
and recorded by the real `Recorder`, every request going through `Recorder.stream` as a live
provider's would: the interrupted request is recorded as a `hang` from the abort it sees. The file
it writes, with the fences `write(logs=...)` derives, must then replay to the recorded run's flow.
What each test pins:
- interrupt-parked-resume: the root addresses its worker by the id the recorded run minted; the
  recording names it `{{child:start-worker}}` (before, the replay's interrupt named a session that
  did not exist, an accepted no-op, and the worker's hang waited out the backstop);
- interrupt-late-hang: the worker hangs in its third step, after the root's interrupt would have
  run in the replay; the recording's interrupt fence holds the root's step until the hang;
- interrupt-notice: the interrupted epoch's notice gets no sender hold (it would hold the worker's
  pre-step before the hang the interrupt waits for: the replay deadlocked);
- followups-checkpoint-failure: the worker's third turn failed its pre-step checkpoint, which no
  reply records; the recording fails the same checkpoint (`failCheckpoint`), so THIRD is claimed
  and never run, as recorded (before, the replay ran it: REPLAY_SCRIPT_EXHAUSTED).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.abort import AbortSignal
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.models import Chunk, ModelRequest, OnRetry, Recorder, ReplayProvider
from dsh.loader.session import SessionStore
from dsh.loader.testing.runner import Flow, arun_flow, plan_flow
from dsh.loader.transcripts import Transcript, load_transcript

REPLAY = Path(__file__).parent.parent / "replay"
BACKSTOP = 15.0  # a replay that waits for an interrupt that passed fails here, not at 60 s


class _Served:
    """The recorder's inner provider: the outer `ReplayProvider`'s own `stream`."""

    name = "replay"

    def __init__(self, outer: ReplayProvider) -> None:
        self.outer = outer

    def stream(self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry) -> AsyncGenerator[Chunk, None]:
        return ReplayProvider.stream(self.outer, request, signal, on_retry)

    async def aclose(self) -> None:
        return None


class RecordedReplay(ReplayProvider):
    """A transcript's replay, recorded by `Recorder` as a live provider is (`dsh run --record`)."""

    def __init__(self, transcript: Transcript) -> None:
        super().__init__(transcript)
        self.recorder = Recorder(_Served(self))  # type: ignore[arg-type]  # a ModelProvider by shape

    def bind_root(self, session_id: str) -> None:
        super().bind_root(session_id)
        self.recorder.note_root(session_id)

    def bind_child(self, session_id: str, descriptor: dict[str, Any]) -> None:
        super().bind_child(session_id, descriptor)
        self.recorder.note_child(session_id, descriptor)

    def ready(self, request: ModelRequest, signal: AbortSignal) -> None:
        return None  # every request through `stream`, so the recorder sees it

    def stream(self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry) -> AsyncGenerator[Chunk, None]:
        return self.recorder.stream(request, signal, on_retry)


async def record(name: str | Path, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """Run `name` under the test profile with the recorder; the written file and its document."""
    plan = plan_flow(name)
    provider = RecordedReplay(plan.script)
    home = tmp_path / "recorded"
    result = await run_tree(RunRequest(home=home, config=plan.config, transcript=plan.script, provider=provider,
                                       fences_allowed=True))
    assert result.violations == []
    store = SessionStore(home)
    logs = {sid: list(store.read(sid).events) for sid in provider.recorder.agent_keys()}
    rec = tmp_path / f"{plan.name}.yaml"
    provider.recorder.write(rec, task=plan.script.spec.task, name=plan.name, logs=logs)
    return rec, load_transcript(rec).spec.model_dump(by_alias=True, exclude_none=True)


async def test_a_recorded_interrupt_parked_resume_replays_to_the_same_flow(tmp_path: Path) -> None:
    rec, doc = await record("interrupt-parked-resume", tmp_path)
    assert doc["agents"]["child-1"]["replies"][0] == {"hang": {"text": "partial"}}
    calls = [c for r in doc["agents"]["root"]["replies"] for c in r.get("toolCalls", [])]
    assert {c["arguments"]["agent_id"] for c in calls if c["name"] != "subagent"} == {"{{child:start-worker}}"}
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=BACKSTOP)
    assert replayed == await arun_flow("interrupt-parked-resume", home=tmp_path / "shipped")


async def test_the_recorded_interrupt_waits_for_the_hang_it_ended(tmp_path: Path) -> None:
    rec, doc = await record(REPLAY / "interrupt-late-hang.yaml", tmp_path)
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=BACKSTOP)
    assert replayed == await arun_flow(REPLAY / "interrupt-late-hang.yaml", home=tmp_path / "shipped")
    assert {"hold": {"agent": "root", "turn": 1, "step": 3, "until": {"all": [
        {"stepReached": {"agent": "child-1", "turn": 1, "step": 3}},
        {"hangReached": {"agent": "child-1"}}]}}} in doc["fences"]


def _without_insert_points(flow: Flow) -> dict[str, Any]:
    """The flow minus where inside a step each message was inserted (`insertedAt`)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "insertedAt"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(flow.data)  # type: ignore[no-any-return]


async def test_an_interrupted_epochs_notice_gets_no_sender_hold(tmp_path: Path) -> None:
    """The one difference left is where the notice lands around the root's step 2/3 boundary: no
    fence can hold an interrupted turn's convergence (§16 holds pre-steps only)."""
    rec, doc = await record(REPLAY / "interrupt-notice.yaml", tmp_path)
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=BACKSTOP)
    shipped = await arun_flow(REPLAY / "interrupt-notice.yaml", home=tmp_path / "shipped")
    assert _without_insert_points(replayed) == _without_insert_points(shipped)
    assert not [f for f in doc["fences"] if f["hold"]["agent"] == "child-1" and f["hold"].get("turn") == 1]


async def test_a_recorded_checkpoint_failure_fails_the_same_checkpoint_in_the_replay(tmp_path: Path) -> None:
    rec, doc = await record("followups-checkpoint-failure", tmp_path)
    replayed = await arun_flow(rec, home=tmp_path / "replay", timeout=BACKSTOP)
    assert replayed == await arun_flow("followups-checkpoint-failure", home=tmp_path / "shipped")
    assert [f for f in doc["fences"] if "failCheckpoint" in f] == [{"failCheckpoint": {
        "agent": "child-1", "turn": 3, "step": 1, "message": "simulated checkpoint failure"}}]
