"""Idle waits, the release of an idle agent and the registry's forwarders (issue 13, `psched`).

`when_idle` waits on a future of its own that `converge` resolves (no `shield` of the shared
activity future); `dispose` of an idle agent releases it in the call (no task); the registry
forwards an agent's seven events through one registration. These pin what the replaced
mechanisms guaranteed.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dsh.loader.agent import user_message
from dsh.loader.agent.registry import _FORWARDED


async def test_a_cancelled_idle_wait_leaves_the_activity_and_other_waiters_alone(make_runtime):
    """What the shield was for: cancelling one `when_idle` caller must neither cancel the agent's
    activity nor wake or fail another caller; the other still returns once the turn ends."""
    rt = await make_runtime([{"text": "done"}])
    agent = await rt.new_agent()
    reached, release = asyncio.Event(), asyncio.Event()

    async def hold(ctx: Any) -> None:
        reached.set()
        await release.wait()

    agent.pre_step.add(hold)
    agent.followup(user_message("go"))
    activity = agent._activity
    first = asyncio.ensure_future(agent.when_idle())
    second = asyncio.ensure_future(agent.when_idle())
    await asyncio.wait_for(reached.wait(), 10)  # the two waiters' first steps ran before this wake (FIFO)
    assert len(agent._idle_waiters) == 2
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert first.cancelled()
    assert activity is not None and not activity.done() and agent.status == "running"
    assert not second.done()
    release.set()
    await asyncio.wait_for(second, 10)  # backstop only
    assert agent.status == "idle" and activity.done()
    assert [e["type"] for e in agent.session.events if e["type"] == "turn/end"] == ["turn/end"]


async def test_an_idle_wait_spans_the_turn_a_latched_wake_opens(make_runtime):
    """A wake at convergence opens a newer activity before the old one resolves: `when_idle`
    returns only after that one too (the loop over activities)."""
    rt = await make_runtime([{"text": "a1"}, {"text": "a2"}])
    agent = await rt.new_agent()
    reached, release = asyncio.Event(), asyncio.Event()

    async def hold(ctx: Any) -> None:
        if ctx.turn == 1:
            reached.set()
            await release.wait()

    agent.pre_step.add(hold)
    agent.followup(user_message("one"))
    waiter = asyncio.ensure_future(agent.when_idle())
    await asyncio.wait_for(reached.wait(), 10)
    assert not waiter.done()
    agent.cancel({"kind": "user"}, keep_inbox=True)  # aborts turn 1 ...
    agent.followup(user_message("two"))  # ... so this wake latches and opens turn 2 at convergence
    release.set()
    await asyncio.wait_for(waiter, 10)
    turns = [e["data"]["turn"] for e in agent.session.events if e["type"] == "turn/end"]
    assert turns == [1, 2] and agent.status == "idle"


async def test_disposing_an_idle_agent_releases_it_in_the_call(make_runtime):
    """An idle agent's dispose runs its cleanups and leaves the registry before it returns (no task
    first), and its future completes with the session's close; a second call gets the same one."""
    rt = await make_runtime([{"text": "done"}])
    agent = await rt.new_agent()
    agent.followup(user_message("go"))
    await agent.when_idle()
    cleaned: list[str] = []
    agent.add_cleanup(lambda: cleaned.append("ran"))
    disposal = agent.dispose()
    assert cleaned == ["ran"] and rt.registry.get(agent.id) is None
    assert agent.dispose() is disposal
    await asyncio.wait_for(disposal, 10)
    assert agent.session.closed


async def test_disposing_a_running_agent_waits_for_idle_before_releasing(make_runtime):
    """The other path: a running agent is aborted, and released only after its driver converged."""
    rt = await make_runtime([{"text": "never"}])
    agent = await rt.new_agent()
    release = asyncio.Event()

    async def hold(ctx: Any) -> None:
        await release.wait()

    agent.pre_step.add(hold)
    agent.followup(user_message("go"))
    cleaned: list[str] = []
    agent.add_cleanup(lambda: cleaned.append(agent.status))
    disposal = agent.dispose()
    assert cleaned == [] and rt.registry.get(agent.id) is agent
    release.set()
    await asyncio.wait_for(disposal, 10)
    assert cleaned == ["idle"] and rt.registry.get(agent.id) is None and agent.session.closed


async def test_the_registry_forwards_at_its_registration_place_and_unregister_removes_only_it(make_runtime):
    """One registration for the seven names keeps the forwarders where the seven `on` calls put
    them: after the agent's earlier listeners, before later ones; unregister removes exactly them."""
    rt = await make_runtime([])
    agent = await rt.new_agent()
    rt.registry.unregister(agent)  # registered again below, between the agent's own listeners
    calls: list[str] = []
    agent.events.on("agent/status", lambda p: calls.append(f"earlier:{p['status']}"))
    rt.registry.register(agent)
    rt.registry.events.on("agent/status", lambda p: calls.append(f"registry:{p['status']}"))
    agent.events.on("agent/status", lambda p: calls.append(f"later:{p['status']}"))
    agent.events.emit("agent/status", {"agent": agent.id, "status": "running"})
    assert calls == ["earlier:running", "registry:running", "later:running"]

    rt.registry.unregister(agent)
    rt.agents.remove(agent)
    calls.clear()
    for name in _FORWARDED:
        agent.events.emit(name, {"agent": agent.id, "status": "idle"})
    assert calls == ["earlier:idle", "later:idle"]  # the agent's own listeners stay; no forwarder is left
    await agent.dispose()


async def test_every_forwarded_event_reaches_the_registry_with_its_agent(make_runtime):
    rt = await make_runtime([])
    agent = await rt.new_agent()
    seen: list[tuple[str, Any]] = []
    for name in _FORWARDED:
        rt.registry.events.on(name, lambda p, name=name: seen.append((name, p["agent"])))
    for name in _FORWARDED:
        agent.events.emit(name, {"x": 1})
    assert seen == [(name, agent) for name in _FORWARDED]
