"""Agent core: turns, steps, streaming cancellation, tools, max-tokens and maintenance (§6.4–§6.11)."""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict

from dsh.loader.agent import Agent, ToolExec, ToolOutput, user_message


def kinds(agent: Agent) -> list[str]:
    return [e["type"] for e in agent.session.events]


def ends(agent: Agent) -> list[dict[str, Any]]:
    return [e["data"]["reason"] for e in agent.session.events if e["type"] == "turn/end"]


def of_type(agent: Agent, kind: str) -> list[dict[str, Any]]:
    return [e["data"] for e in agent.session.events if e["type"] == kind]


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StageTool:
    """Stages two messages for its own agent during execution."""

    name = "stage"
    description = "stages input"
    parameters = NoArgs
    concurrency_safe = True
    system_section = None

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        exec.stage(user_message("staged one"))
        exec.stage(user_message("staged two"))
        return ToolOutput(text="staged", value={"n": 2})


class CountingTool:
    name = "count"
    description = "counts calls"
    parameters = NoArgs
    concurrency_safe = True
    system_section = None

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        self.calls += 1
        return ToolOutput(text=f"call {self.calls}")


def hang_reached(rt: Any, key: str = "root") -> asyncio.Event:
    event = asyncio.Event()
    rt.replay.add_hang_listener(lambda k: event.set() if k == key else None)
    return event


async def test_interrupted_stream_logs_its_partial_text(make_runtime):
    """Matrix 12."""
    rt = await make_runtime([{"hang": {"text": "partial"}}, {"text": "second"}])
    agent = await rt.new_agent()
    reached = hang_reached(rt)
    agent.followup(user_message("go"))
    await reached.wait()
    agent.cancel({"kind": "user"})
    await agent.when_idle()
    types = kinds(agent)
    i = types.index("assistant/message")
    assert types[i + 1] == "step/end"
    msg = of_type(agent, "assistant/message")[0]
    assert msg["interrupted"] is True and "finish" not in msg
    assert msg["message"]["content"] == [{"type": "text", "text": "partial"}]
    agent.followup(user_message("again"))
    await agent.when_idle()
    second = rt.provider.requests[1].messages
    assert any(m["role"] == "assistant" and m["content"] == [{"type": "text", "text": "partial"}] for m in second)


async def test_cancel_before_dispatch_gives_unstarted_calls_synthetic_results(make_runtime):
    """Matrix 13: the pre-dispatch tool checkpoint is where the cancel lands."""
    rt = await make_runtime([{"toolCalls": [{"id": "c1", "name": "count", "arguments": {}}]}])
    agent = await rt.new_agent()
    tool = CountingTool()
    agent.tools = [tool]
    seen = asyncio.Event()
    agent.session.subscribe(lambda e: seen.set() if e["type"] == "assistant/message" else None)
    agent.followup(user_message("go"))
    await seen.wait()
    agent.cancel({"kind": "user"})
    await agent.when_idle()
    assert tool.calls == 0
    calls, results = of_type(agent, "tool/call"), of_type(agent, "tool/result")
    assert [c["callId"] for c in calls] == ["c1"]
    assert results[0]["error"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert results[0]["message"]["content"][0]["isError"] is True
    assert ends(agent)[0]["kind"] == "aborted"


async def test_max_tokens_reply_drops_its_tool_calls(make_runtime):
    """Matrix 16."""
    rt = await make_runtime(
        [{"text": "cut", "toolCalls": [{"id": "c1", "name": "count", "arguments": {}}], "finish": "max-tokens"}]
    )
    agent = await rt.new_agent()
    agent.tools = [CountingTool()]
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert "tool/call" not in kinds(agent)
    msg = of_type(agent, "assistant/message")[0]
    assert msg["finish"] == "max-tokens"
    assert all(b["type"] != "tool-call" for b in msg["message"]["content"])
    assert ends(agent) == [{"kind": "max-tokens"}]


async def test_max_tokens_is_sticky_within_its_turn(make_runtime):
    """Matrix 17: step 1 max-tokens, a steered message forces step 2 which stops; next turn is clean."""
    rt = await make_runtime([{"text": "half", "finish": "max-tokens"}, {"text": "rest"}, {"text": "clean"}])
    agent = await rt.new_agent()

    async def steer_once(ctx: Any) -> None:
        if ctx.turn == 1 and ctx.step == 1:
            agent.steer(user_message("more"))

    agent.pre_step.add(steer_once)
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert [e["data"]["step"] for e in agent.session.events if e["type"] == "step/start"] == [1, 2]
    agent.followup(user_message("again"))
    await agent.when_idle()
    assert ends(agent) == [{"kind": "max-tokens"}, {"kind": "completed"}]


async def test_steered_message_after_a_stop_gets_another_step(make_runtime):
    """Matrix 18."""
    rt = await make_runtime([{"text": "first"}, {"text": "second"}])
    agent = await rt.new_agent()

    async def steer_during_step(ctx: Any) -> None:
        if ctx.step == 1:
            agent.steer(user_message("late"))

    agent.pre_step.add(steer_during_step)
    agent.followup(user_message("go"))
    await agent.when_idle()
    assert kinds(agent).count("turn/start") == 1
    steps = of_type(agent, "step/start")
    assert [s["step"] for s in steps] == [1, 2]
    assert ends(agent) == [{"kind": "completed"}]
    texts = [e["data"]["content"][0]["text"] for e in agent.session.events if e["type"] == "user/message"]
    assert texts == ["go", "late"]


async def test_staged_messages_follow_the_tool_result_in_the_next_step(make_runtime):
    """Matrix 19."""
    rt = await make_runtime([{"toolCalls": [{"id": "s1", "name": "stage", "arguments": {}}]}, {"text": "done"}])
    agent = await rt.new_agent()
    agent.tools = [StageTool()]
    agent.followup(user_message("go"))
    await agent.when_idle()
    types = kinds(agent)
    r = types.index("tool/result")
    assert types[r + 1 : r + 3] == ["agent/inbox/spliced", "agent/inbox/spliced"]
    second_step = [e for e in agent.session.events if e["type"] == "user/message"][1:]
    assert [m["data"]["content"][0]["text"] for m in second_step] == ["staged one", "staged two"]
    assert of_type(agent, "tool/result")[0]["value"] == {"n": 2}
    step_of = {e["seq"]: e for e in agent.session.events}
    assert step_of is not None
    assert ends(agent) == [{"kind": "completed"}]


async def test_maintenance_latch_replays_only_what_survived_a_cancel(make_runtime):
    """Matrix 14."""
    rt = await make_runtime([{"text": "B answered"}])
    agent = await rt.new_agent()
    release = asyncio.Event()
    task_signal: list[Any] = []

    async def task(signal: Any) -> str:
        task_signal.append(signal)
        await release.wait()
        return "maintained"

    result = agent.run_maintenance(task)
    assert agent.status == "idle"
    agent.followup(user_message("A"))
    agent.cancel({"kind": "user"})
    agent.followup(user_message("B"))
    release.set()
    assert await result == "maintained"
    await agent.when_idle()
    assert task_signal[0].aborted
    assert len(rt.provider.requests) == 1
    texts = [e["data"]["content"][0]["text"] for e in agent.session.events if e["type"] == "user/message"]
    assert texts == ["B"]


async def test_unknown_tool_and_invalid_arguments_become_error_results(make_runtime):
    """Matrix 86 (agent part): INVALID_ARGS / UNKNOWN_TOOL rendered as T-TOOL-ERROR."""
    rt = await make_runtime(
        [
            {"toolCalls": [{"id": "u1", "name": "nope", "arguments": {}}, {"id": "i1", "name": "count", "arguments": {"x": 1}}]},
            {"text": "ok"},
        ]
    )
    agent = await rt.new_agent()
    agent.tools = [CountingTool()]
    agent.followup(user_message("go"))
    await agent.when_idle()
    results = of_type(agent, "tool/result")
    assert [r["error"]["code"] for r in results] == ["UNKNOWN_TOOL", "INVALID_ARGS"]
    text = results[0]["message"]["content"][0]["content"][0]["text"]
    assert text == "Tool failed [UNKNOWN_TOOL]: there is no tool named nope"
    assert results[1]["message"]["content"][0]["content"][0]["text"].startswith("Tool failed [INVALID_ARGS]: arguments rejected: x")


class ExclusiveTool:
    """Not concurrency-safe: records how many calls were in flight when it ran."""

    name = "exclusive"
    description = "runs alone"
    parameters = NoArgs
    concurrency_safe = False
    system_section = None

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        self.log.append(f"start {exec.call_id}")
        await asyncio.sleep(0)  # yield once, so an overlapping call would interleave here
        self.log.append(f"end {exec.call_id}")
        return ToolOutput(text="done")


class SafeTool:
    name = "safe"
    description = "may share the pool"
    parameters = NoArgs
    concurrency_safe = True
    system_section = None

    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def run(self, args: Any, exec: ToolExec) -> ToolOutput:
        self.log.append(f"start {exec.call_id}")
        await asyncio.sleep(0)
        self.log.append(f"end {exec.call_id}")
        return ToolOutput(text="done")


async def test_a_call_that_is_not_concurrency_safe_runs_alone(make_runtime):
    """§6.9: other calls are barriers: earlier calls finish before it starts, later ones start after."""
    rt = await make_runtime(
        [
            {"toolCalls": [
                {"id": "s1", "name": "safe", "arguments": {}},
                {"id": "x", "name": "exclusive", "arguments": {}},
                {"id": "s2", "name": "safe", "arguments": {}},
            ]},
            {"text": "ok"},
        ]
    )
    agent = await rt.new_agent()
    log: list[str] = []
    agent.tools = [SafeTool(log), ExclusiveTool(log)]
    agent.followup(user_message("go"))
    await agent.when_idle()
    x = log.index("start x")
    assert log[x + 1] == "end x"
    assert log.index("end s1") < x < log.index("start s2")
    assert [r["callId"] for r in of_type(agent, "tool/result")] == ["s1", "x", "s2"]


async def test_step_limit_ends_the_turn_with_an_error(make_runtime):
    """§6.7 step 4i: a turn that keeps calling tools past `maxStepsPerTurn` ends `error STEP_LIMIT`."""
    replies = [{"toolCalls": [{"id": f"c{n}", "name": "count", "arguments": {}}]} for n in range(3)]
    rt = await make_runtime(replies + [{"text": "unused"}])
    agent = await rt.new_agent(max_steps_per_turn=2)
    agent.tools = [CountingTool()]
    errors: list[Any] = []
    agent.events.on("agent/error", errors.append)
    agent.followup(user_message("go"))
    await agent.when_idle()
    reason = ends(agent)[0]
    assert reason["kind"] == "error" and reason["error"]["code"] == "STEP_LIMIT"
    assert [s["step"] for s in of_type(agent, "step/start")] == [1, 2]
    assert len(errors) == 1
    rt.replay.finish_checks()  # two replies were never requested: the limit stopped the turn
    assert {v["code"] for v in rt.replay.violations} == {"REPLAY_UNCONSUMED"}
