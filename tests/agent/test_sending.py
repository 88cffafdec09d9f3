"""Agent core: sending, the synchronous start prefix (S1), cancel and the latched wake (SPEC §6.2–§6.4).

Every test drives the real Agent over the JSONL store; the model is a replay script, and races are
pinned with `hang` replies, hang listeners and pre-step hooks, never with sleeps.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dsh.loader.agent import Agent, user_message
from dsh.loader.errors import DshError, InboxError


def kinds(agent: Agent) -> list[str]:
    return [e["type"] for e in agent.session.events]


def ends(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


def user_texts(agent: Agent) -> list[str]:
    return [e["data"]["content"][0]["text"] for e in agent.session.events if e["type"] == "user/message"]


def hang_reached(rt: Any, key: str = "root") -> asyncio.Event:
    event = asyncio.Event()
    rt.replay.add_hang_listener(lambda k: event.set() if k == key else None)
    return event


async def test_followup_from_idle_opens_the_turn_before_returning(make_runtime):
    """Matrix 1: running, insert, turn/start 1 and the claim are logged before `followup` returns."""
    rt = await make_runtime([{"text": "ok"}])
    agent = await rt.new_agent()
    order: list[str] = []
    agent.events.on("agent/inbox/claimed", lambda p: order.append(f"claimed after {kinds(agent)[-2]}"))
    agent.followup(user_message("hi"))
    assert agent.status == "running"
    assert kinds(agent) == ["agent/inbox/spliced", "turn/start", "agent/inbox/spliced"]
    claim = agent.session.events[2]["data"]
    assert claim["target"] == "next-turn" and claim["removedCount"] == 1 and "outcome" not in claim
    assert order == ["claimed after turn/start"]
    await agent.when_idle()
    assert ends(agent) == [{"kind": "completed"}]


async def test_inject_queues_into_next_step_without_a_turn(make_runtime):
    """Matrix 2."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    agent.inject(user_message("later"))
    assert agent.status == "idle"
    assert kinds(agent) == ["agent/inbox/spliced"]
    assert agent.session.events[0]["data"]["target"] == "next-step"
    assert len(agent.inbox.next_step) == 1
    await agent.when_idle()
    assert "turn/start" not in kinds(agent)


async def test_followups_in_one_burst_run_one_turn_each_in_fifo_order(make_runtime):
    """Matrix 3."""
    rt = await make_runtime([{"text": "a1"}, {"text": "a2"}, {"text": "a3"}])
    agent = await rt.new_agent()
    statuses: list[str] = []
    agent.events.on("agent/status", lambda p: statuses.append(p["status"]))
    for text in ["one", "two", "three"]:
        agent.followup(user_message(text))
    await agent.when_idle()
    assert user_texts(agent) == ["one", "two", "three"]
    per_turn: dict[int, int] = {}
    current = 0
    for e in agent.session.events:
        if e["type"] == "turn/start":
            current = e["data"]["turn"]
        elif e["type"] == "user/message":
            per_turn[current] = per_turn.get(current, 0) + 1
    assert per_turn == {1: 1, 2: 1, 3: 1}
    assert statuses == ["running", "idle"]
    assert len(rt.provider.requests) == 3


async def test_cancel_on_an_idle_agent_arms_nothing(make_runtime):
    """Matrix 4."""
    rt = await make_runtime([{"text": "fine"}])
    agent = await rt.new_agent()
    agent.cancel({"kind": "user"})
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert ends(agent) == [{"kind": "completed"}]


async def test_cancel_keep_inbox_does_not_restore_claimed_prompt(make_runtime):
    """Matrix 5."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    agent.followup(user_message("go"))
    agent.cancel({"kind": "user"}, keep_inbox=True)
    await agent.when_idle()
    splices = [e["data"] for e in agent.session.events if e["type"] == "agent/inbox/spliced"]
    assert all(s.get("outcome") != "canceled" for s in splices)
    assert rt.provider.requests == []
    assert ends(agent) == [{"kind": "aborted", "reason": {"kind": "user"}}]
    assert not agent.inbox.has_pending
    assert "step/start" not in kinds(agent)


async def test_waking_send_during_abort_convergence_latches_and_runs(make_runtime):
    """Matrix 6."""
    rt = await make_runtime([{"hang": {}}, {"text": "B done"}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    agent.cancel({"kind": "user"}, keep_inbox=True)
    agent.followup(user_message("B"))
    assert agent.inbox.next_turn[0]["content"][0]["text"] == "B"
    await agent.when_idle()
    assert [r["kind"] for r in ends(agent)] == ["aborted", "completed"]
    assert len(rt.provider.requests) == 2
    assert user_texts(agent) == ["A", "B"]


async def test_call_when_idle_waits_for_the_activity_a_latched_wake_opens(make_runtime):
    """The callback form of `when_idle` (issue 13: the settlement watcher and the disposal wait
    with it, no task): the latched wake replayed at convergence opens a second activity, and the
    callback fires only once that one has ended too, as `when_idle` returns."""
    rt = await make_runtime([{"hang": {}}, {"text": "B done"}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    fired: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
    agent.call_when_idle(lambda: fired.set_result([r["kind"] for r in ends(agent)]))
    agent.cancel({"kind": "user"}, keep_inbox=True)
    agent.followup(user_message("B"))  # latched: runs when the aborted activity converges
    assert await asyncio.wait_for(fired, 10) == ["aborted", "completed"]  # backstop only
    assert agent.status == "idle"


async def test_default_cancel_before_convergence_clears_inbox_and_latch(make_runtime):
    """Matrix 7."""
    rt = await make_runtime([{"hang": {}}, {"text": "later"}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    agent.cancel({"kind": "user"}, keep_inbox=True)
    agent.followup(user_message("B"))
    agent.cancel({"kind": "user"})
    await agent.when_idle()
    assert not agent.inbox.has_pending
    assert len(rt.provider.requests) == 1
    assert [e["data"]["turn"] for e in agent.session.events if e["type"] == "turn/start"] == [1]
    agent.followup(user_message("C"))
    await agent.when_idle()
    assert user_texts(agent) == ["A", "C"]
    assert [r["kind"] for r in ends(agent)] == ["aborted", "completed"]


async def test_removed_latched_message_does_not_start_an_empty_turn(make_runtime):
    """Matrix 8."""
    rt = await make_runtime([{"hang": {}}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    agent.cancel({"kind": "user"}, keep_inbox=True)
    steered = user_message("S")
    agent.steer(steered)
    assert agent.inbox.next_turn[0]["id"] == steered["id"]  # redirected by §6.2
    assert agent.inbox.remove(steered["id"])
    await agent.when_idle()
    assert kinds(agent).count("turn/start") == 1


async def test_send_during_disposal_convergence_is_not_latched(make_runtime):
    """Matrix 9."""
    rt = await make_runtime([{"hang": {}}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    done = agent.dispose()
    agent.followup(user_message("late"))
    await done
    assert len(rt.provider.requests) == 1
    assert kinds(agent).count("turn/start") == 1
    assert ends(agent) == [{"kind": "aborted", "reason": {"kind": "disposed"}}]


async def test_status_listener_cancel_prevents_any_turn(make_runtime):
    """Matrix 10."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    agent.events.on("agent/status", lambda p: agent.cancel({"kind": "user"}) if p["status"] == "running" else None)
    agent.followup(user_message("never"))
    await agent.when_idle()
    assert "turn/start" not in kinds(agent)
    assert agent.status == "idle"
    splices = [e["data"] for e in agent.session.events if e["type"] == "agent/inbox/spliced"]
    assert splices[-1].get("outcome") == "canceled"


async def test_first_cancel_cause_wins(make_runtime):
    """Matrix 11."""
    rt = await make_runtime([{"hang": {}}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("A"))
    await reached.wait()
    agent.cancel({"kind": "parent"})
    agent.cancel({"kind": "user"})
    await agent.when_idle()
    assert ends(agent) == [{"kind": "aborted", "reason": {"kind": "parent"}}]


async def test_send_whose_durable_append_fails_changes_nothing(make_runtime):
    """Matrix 22: the append raises (closed session), the inbox is unchanged and nothing wakes."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    await rt.store.close(agent.session)
    with pytest.raises(DshError):
        agent.followup(user_message("x"))
    assert not agent.inbox.has_pending
    assert agent.status == "idle"
    assert agent.session.events == []


async def test_duplicate_message_id_is_refused_before_logging(make_runtime):
    """Matrix 23."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    m = user_message("x")
    agent.inject(m)
    before = len(agent.session.events)
    with pytest.raises(InboxError) as err:
        agent.inject(dict(m))
    assert err.value.code == "DUPLICATE_MESSAGE"
    assert len(agent.session.events) == before
