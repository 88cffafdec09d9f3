"""Recordings of runs in which the user acted from another terminal replay (issue 12 "Not yet" item
4; SPEC §15.5, §18.2): the user's `dsh interrupt` and `dsh send`, made here through the run's real
control socket (`loader.host.client.call`, what the commands call), are written as the
transcript's `user` list (`stop_fences.observed_user_interrupts`, `schedule.observed_user_sends`),
which the replay's runner does again (`loader/scripted_user.py`).

As in test_record_stops.py, the transcript is served by its `ReplayProvider` and recorded by the
real `Recorder` around it, and the recording must replay to the recorded run's own flow (the
projection of its logs). Before, the recording kept the interrupted child's `hang` and nothing
else: its replay waited there until the backstop (the user-interrupt test, checked by removing the
`user` entry from the file), and a user's message was never sent again (REPLAY_UNCONSUMED).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from dsh.loader.agent import Agent, PreStep
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.host.client import call
from dsh.loader.session import SessionStore
from dsh.loader.sinks import RunSinks
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import normalize
from dsh.loader.testing.runner import Flow, arun_flow, plan_flow
from dsh.loader.transcripts import load_transcript

from .test_record_stops import RecordedReplay

REPLAY = Path(__file__).parent.parent / "replay"
BACKSTOP = 20.0  # a replay whose user does not act fails here, not at 60 s
RPC_TIMEOUT = 10.0


async def _record_with_user(transcript: Path | str, tmp_path: Path, user: Any) -> tuple[Path, dict[str, Any], Flow]:
    """Run `transcript` with the recorder and the control socket; `user(home, root_id, provider,
    reached)` acts as the user once started (`reached`: an event per (agent key, turn, step) pre-step).
    Returns the recording, its document and the recorded run's own flow."""
    plan = plan_flow(transcript)
    provider = RecordedReplay(plan.script)
    home = tmp_path / "recorded"
    started: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    reached: dict[tuple[str, int, int], asyncio.Event] = {}

    def hook(agent: Agent) -> None:
        async def pre_step(ctx: PreStep) -> None:
            key = provider.agent_key_of(ctx.agent.id)
            reached.setdefault((str(key), ctx.turn, ctx.step), asyncio.Event()).set()
        agent.pre_step.add(pre_step, order=10)

    sinks = RunSinks(on_started=lambda root_id: started.done() or started.set_result(root_id))
    run = asyncio.ensure_future(run_tree(RunRequest(
        home=home, config=plan.config, transcript=plan.script, provider=provider, fences_allowed=True,
        serve_control=True, sinks=sinks, agent_hooks=[hook])))
    root_id = await asyncio.wait_for(asyncio.shield(started), BACKSTOP)
    acting = asyncio.ensure_future(user(home, root_id, provider, reached))
    result = await asyncio.wait_for(run, BACKSTOP)
    await asyncio.wait_for(acting, RPC_TIMEOUT)
    assert result.violations == []
    store = SessionStore(home)
    logs = {sid: list(store.read(sid).events) for sid in provider.recorder.agent_keys()}
    rec = tmp_path / f"{plan.name}.yaml"
    provider.recorder.write(rec, task=plan.script.spec.task, name=plan.name, logs=logs)
    live = Flow(normalize(project(home, result.root_session_id, result, [], plan.name)))
    return rec, load_transcript(rec).spec.model_dump(by_alias=True, exclude_none=True), live


async def _reached(reached: dict[tuple[str, int, int], asyncio.Event], key: tuple[str, int, int]) -> None:
    await reached.setdefault(key, asyncio.Event()).wait()


async def _interrupt_at_the_hang(home: Path, root_id: str, provider: RecordedReplay, reached: Any) -> None:
    """The user: once the child's hang is reached and the root's follow-up is queued behind it (the
    root reached its step 3), `subagent.interrupt` on the socket. (Acting at the hang alone races the
    root's `send_message`, which then either parks or opens a turn the script has no reply for.)"""
    hang = asyncio.Event()
    off = provider.add_hang_listener(lambda key: hang.set())
    try:
        await hang.wait()
        await _reached(reached, ("root", 1, 3))
    finally:
        off()
    child = provider.session_of("child")
    assert child is not None
    answer = await call(home, root_id, "subagent.interrupt", {"parentSessionId": root_id, "childSessionId": child},
                        timeout=RPC_TIMEOUT)
    assert answer == {"accepted": True}


async def test_a_run_the_user_interrupted_through_the_socket_replays_to_its_flow(tmp_path: Path) -> None:
    """interrupt-demo: the child hangs until someone stops it; here the user does, by
    `subagent.interrupt` on the socket once the hang is reached (as `dsh interrupt` would)."""
    rec, doc, live = await _record_with_user("interrupt-demo", tmp_path, _interrupt_at_the_hang)
    child = next(s for s in live.data["sessions"] if s.get("spawnCall") == "start-child")
    assert child["turns"][0]["end"] == {"kind": "aborted", "cause": "user"}
    assert [a["interrupt"]["agent"] for a in doc["user"]] == ["child-1"]
    assert {"hangReached": {"agent": "child-1"}} in doc["user"][0]["interrupt"]["when"]["all"]
    first = await arun_flow(rec, home=tmp_path / "replay-a", timeout=BACKSTOP)
    second = await arun_flow(rec, home=tmp_path / "replay-b", timeout=BACKSTOP)
    assert first == second == live


USER_SEND = Path(__file__).parents[1] / "replay" / "user-send-live.yaml"  # no `user` list: the test is the user


async def test_a_run_the_user_sent_to_through_the_socket_replays_to_its_flow(tmp_path: Path) -> None:
    async def user(home: Path, root_id: str, provider: RecordedReplay, reached: Any) -> None:
        await _reached(reached, ("worker", 1, 1))
        child = provider.session_of("worker")
        assert child is not None
        answer = await call(home, root_id, "subagent.prompt",
                            {"parentSessionId": root_id, "childSessionId": child, "message": "EXTRA"},
                            timeout=RPC_TIMEOUT)
        assert "messageId" in answer

    rec, doc, live = await _record_with_user(USER_SEND, tmp_path, user)
    assert [(a["send"]["agent"], a["send"]["text"]) for a in doc["user"]] == [("child-1", "EXTRA")]
    first = await arun_flow(rec, home=tmp_path / "replay-a", timeout=BACKSTOP)
    second = await arun_flow(rec, home=tmp_path / "replay-b", timeout=BACKSTOP)
    assert first == second == live


async def test_without_its_user_entry_the_recorded_interrupt_does_not_replay(tmp_path: Path) -> None:
    """The rule broken on purpose: the recording minus `user` is what the recorder wrote before
    (the hang kept, nothing to end it), and its replay never ends."""
    rec, _, _ = await _record_with_user("interrupt-demo", tmp_path, _interrupt_at_the_hang)
    yaml = YAML()
    data = yaml.load(rec.read_text(encoding="utf-8"))
    del data["user"]
    with rec.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    try:
        await arun_flow(rec, home=tmp_path / "replay", timeout=3.0)
    except TimeoutError:
        return
    raise AssertionError("a recording without its user entry replayed")
