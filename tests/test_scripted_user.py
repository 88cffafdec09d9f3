"""The transcript's user (loader/scripted_user.py; issue 12 "Not yet" item 4): `user: [{interrupt:
...}, {send: ...}]` are done by the runner through the control methods `dsh interrupt` and `dsh
send` call, once their `when` holds, so a transcript holding them replays without a person, to one
flow.

- tests/replay/user-interrupt.yaml: the worker's hang is interrupted as the user would; its turn
  ends `aborted` with cause `user`, the follow-up queued behind it stays parked (the root's step 3
  is held until `parked`, so a run where nobody interrupts fails with FENCE_TIMEOUT) until the
  root's waking message, and the two then run in FIFO order;
- tests/replay/user-send.yaml: the user's message reaches the worker with source `user` while its
  first turn runs (the worker's step is held until it is in), and becomes its second turn;
- the forms are validated at load time like every other key: an unknown key or value, and a user
  action aimed at the root (no `<root>/<child>` address names it), are TranscriptErrors located at
  `file:line:col`.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.errors import TranscriptError
from dsh.loader.testing.runner import arun_flow
from dsh.loader.transcripts import load_transcript

REPLAY = Path(__file__).parent / "replay"
BACKSTOP = 20.0  # a replay whose user never acts fails at its fence timeout (10 s) first


def _session(flow: dict[str, Any], label: str) -> dict[str, Any]:
    return next(s for s in flow["sessions"] if s.get("label") == label)


def _inputs(turn: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["source"], m["text"]) for step in turn["steps"] for m in step["input"]]


async def test_a_user_interrupt_replays_to_one_flow_and_parks_the_queued_work(tmp_path: Path) -> None:
    first = await arun_flow(REPLAY / "user-interrupt.yaml", home=tmp_path / "a", timeout=BACKSTOP)
    second = await arun_flow(REPLAY / "user-interrupt.yaml", home=tmp_path / "b", timeout=BACKSTOP)
    assert first == second
    worker = _session(first.data, "worker")
    interrupted, *resumed = worker["turns"]
    assert interrupted["end"] == {"kind": "aborted", "cause": "user"}
    assert interrupted["steps"][-1]["output"] == {"text": "partial", "interrupted": True}
    # Parked until the root's "Go on." woke it, then FIFO: the queued follow-up first.
    assert [_inputs(t) for t in resumed] == [[("coordinator", "Then summarise.")], [("coordinator", "Go on.")]]
    assert first.data["result"]["output"] == "WORKER_DONE"


async def test_a_user_send_replays_to_one_flow_with_source_user(tmp_path: Path) -> None:
    first = await arun_flow(REPLAY / "user-send.yaml", home=tmp_path / "a", timeout=BACKSTOP)
    second = await arun_flow(REPLAY / "user-send.yaml", home=tmp_path / "b", timeout=BACKSTOP)
    assert first == second
    worker = _session(first.data, "worker")
    assert [_inputs(t) for t in worker["turns"]] == [[("user", "Say FIRST_OK.")], [("user", "EXTRA")]]
    assert first.data["result"]["output"] == "WORKER_DONE"


# ---- validation ----------------------------------------------------------------------------------

VALID = textwrap.dedent("""
    version: 1
    name: demo
    task: Do it.
    user:
      - send: {agent: child, text: more, when: {stepReached: {agent: child, turn: 1, step: 1}}}
      - interrupt: {agent: child, when: {hangReached: {agent: child}}}
    agents:
      root:
        replies:
          - toolCalls:
              - {id: start, name: subagent, arguments: {label: c, prompt: go}}
          - text: done
      child:
        spawnedBy: start
        replies:
          - hang: {text: partial}
""").lstrip("\n")


def _load_error(tmp_path: Path, body: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(TranscriptError) as info:
        load_transcript(path)
    assert info.value.code == "TRANSCRIPT_INVALID"
    return info.value.message.replace(str(path), "FILE")


def _at(body: str, needle: str) -> str:
    index = body.index(needle)
    return f"{body.count(chr(10), 0, index) + 1}:{index - (body.rfind(chr(10), 0, index) + 1) + 1}"


def test_the_valid_forms_load(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(VALID, encoding="utf-8")
    spec = load_transcript(path).spec
    assert spec.user[0].send is not None and spec.user[0].send.text == "more"
    assert spec.user[1].interrupt is not None and spec.user[1].interrupt.agent == "child"
    assert spec.scripts_user()


@pytest.mark.parametrize(("old", "new", "needle", "where"), [
    pytest.param("hang: {text: partial}", "hang: {text: partial, interrupt: user}", "interrupt: user",
                 "agents.child.replies[0].hang.interrupt", id="no-interrupt-in-a-reply"),
    pytest.param("text: more,", "text: more, colour: red,", "colour", "user[0].send.colour", id="send-unknown-key"),
    pytest.param("- send:", "- shout:", "shout", "user[0].shout", id="unknown-action"),
    pytest.param("{agent: child, text: more", "{agent: root, text: more", "agent: root", "user[0].send.agent",
                 id="send-to-root"),
    pytest.param("{agent: child, turn: 1", "{agent: nobody, turn: 1", "agent: nobody",
                 "user[0].send.when.stepReached.agent", id="when-unknown-agent"),
    pytest.param("interrupt: {agent: child", "interrupt: {agent: root", "interrupt: {agent: root", "user[1].interrupt.agent",
                 id="interrupt-root"),
    pytest.param("- interrupt: {agent: child, when: {hangReached: {agent: child}}}",
                 "- {interrupt: {agent: child, when: {hangReached: {agent: child}}}, send: {agent: child, text: x, "
                 "when: {hangReached: {agent: child}}}}", "- {interrupt", "user[1]", id="two-forms"),
])
def test_an_invalid_user_form_is_a_located_transcript_error(tmp_path: Path, old: str, new: str, needle: str,
                                                             where: str) -> None:
    body = VALID.replace(old, new)
    message = _load_error(tmp_path, body)
    line = _at(body, needle).split(":")[0]
    assert message.startswith(f"FILE:{line}:"), message
    assert f": {where}: " in message, message
