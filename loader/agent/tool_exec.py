"""Tool execution (SPEC §6.9).

Calls start in model order: concurrency-safe calls in a rolling pool of
`agent.maxParallelToolCalls`, others as barriers. Each call is logged as `tool/call` when it starts;
results commit in model order. Messages a tool stages (`exec.stage`) are inserted into next-step right
after that call's result, so input never separates a call from its result. After an abort, started
calls drain and commit, and every unstarted call gets a `tool/call` plus an `ABORTED_BEFORE_DISPATCH`
result.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


from dsh.loader.abort import AbortSignal
from dsh.loader.agent.inbox import Message
from dsh.loader.agent.messages import tool_result_message
from dsh.loader.agent.tooling import Tool, ToolExec, ToolOutput
from dsh.loader.errors import CheckpointError, DshError, error_chain
from dsh.loader.texts import TEXTS, render

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["execute_tools"]

logger = logging.getLogger(__name__)


@dataclass
class _Slot:
    block: dict[str, Any]
    done: asyncio.Future[tuple[ToolOutput | None, dict[str, Any] | None]]
    exec: ToolExec | None = None
    started: bool = False
    staged: list[Message] = field(default_factory=list)


async def execute_tools(
    agent: Agent, turn: int, step: int, calls: list[dict[str, Any]], signal: AbortSignal
) -> bool:
    """Run the step's tool calls; True when a tool concluded the turn."""
    loop = asyncio.get_running_loop()
    slots = [_Slot(block=b, done=loop.create_future()) for b in calls]
    pool = asyncio.Semaphore(max(1, agent.options.max_parallel_tool_calls))
    tasks: list[asyncio.Task[None]] = []
    concluded = False

    async def run(slot: _Slot, tool: Tool | None, args: Any) -> None:
        try:
            try:
                await agent.store.flush(agent.session)  # tool-execution checkpoint (§5.5)
            except CheckpointError as exc:
                if signal.aborted:
                    slot.done.set_result((None, _aborted_error()))
                else:
                    slot.done.set_result((None, {"code": exc.code, "message": exc.message}))
                return
            if signal.aborted:
                slot.done.set_result((None, _aborted_error()))
                return
            assert tool is not None and slot.exec is not None
            out = await tool.run(args, slot.exec)
            slot.done.set_result((out, None))
        except asyncio.CancelledError:
            if not slot.done.done():
                slot.done.set_result((None, {"code": "UNKNOWN", "message": "tool call was cancelled"}))
            raise
        except BaseException as exc:
            code = exc.code if isinstance(exc, DshError) else "UNKNOWN"
            message = exc.message if isinstance(exc, DshError) else error_chain(exc)
            if not slot.done.done():
                slot.done.set_result((None, {"code": code, "message": message}))
        finally:
            pool.release()

    async def start_all() -> None:
        for slot in slots:
            name = slot.block["name"]
            tool = next((t for t in agent.tools if t.name == name), None)
            if tool is not None and not tool.concurrency_safe:
                await asyncio.gather(*tasks, return_exceptions=True)  # barrier
            await pool.acquire()
            if signal.aborted:
                pool.release()
                return  # this and every later call stay unstarted
            agent.session.append(
                "tool/call",
                {"turn": turn, "step": step, "callId": slot.block["id"], "name": name,
                 "arguments": slot.block.get("arguments", "{}")},
            )
            slot.started = True
            error, args = _prepare(tool, name, slot.block.get("arguments", "{}"))
            if error is not None:
                pool.release()
                slot.done.set_result((None, error))
                continue
            slot.exec = ToolExec(agent=agent, call_id=slot.block["id"], signal=signal)
            tasks.append(asyncio.create_task(run(slot, tool, args), name=f"tool:{slot.block['id']}"))
            if tool is not None and not tool.concurrency_safe:
                await asyncio.gather(tasks[-1], return_exceptions=True)  # a barrier runs alone

    starter = asyncio.create_task(start_all(), name=f"tools:{agent.id}:{turn}.{step}")
    try:
        for slot in slots:
            # Wait until this slot started (or the starter gave up on it) and finished.
            while not slot.started and not starter.done():
                await asyncio.wait({starter, _started_event(slot)}, return_when=asyncio.FIRST_COMPLETED)
            if not slot.started:
                agent.session.append(
                    "tool/call",
                    {"turn": turn, "step": step, "callId": slot.block["id"], "name": slot.block["name"],
                     "arguments": slot.block.get("arguments", "{}")},
                )
                _commit(agent, turn, step, slot, None, _aborted_error())
                continue
            out, error = await asyncio.shield(slot.done)
            _commit(agent, turn, step, slot, out, error)
            if out is not None and out.concludes_turn:
                concluded = True
    finally:
        await asyncio.gather(starter, *tasks, return_exceptions=True)
    return concluded


def _started_event(slot: _Slot) -> asyncio.Future[Any]:
    # The slot's `done` future completes after start; before start we wake on the starter's progress.
    return slot.done


def _prepare(tool: Tool | None, name: str, arguments: str) -> tuple[dict[str, Any] | None, Any]:
    if tool is None:
        return {"code": "UNKNOWN_TOOL", "message": render("T-ERR-UNKNOWN-TOOL", name=name)}, None
    try:
        raw = json.loads(arguments or "{}")
        return None, tool.parameters.model_validate(raw)
    except json.JSONDecodeError as exc:
        return {"code": "INVALID_ARGS", "message": render("T-ERR-INVALID-ARGS", issues=f"not JSON: {exc.msg}")}, None
    except Exception as exc:
        # Imported here: a tool's parameters validate without pydantic when they can (issue 13), so
        # only invalid arguments reach a pydantic model, and pydantic is loaded when it raised.
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        issues = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in exc.errors()
        )
        return {"code": "INVALID_ARGS", "message": render("T-ERR-INVALID-ARGS", issues=issues)}, None


def _aborted_error() -> dict[str, Any]:
    return {"code": "ABORTED_BEFORE_DISPATCH", "message": TEXTS["T-ABORTED-BEFORE-DISPATCH"]}


def _commit(
    agent: Agent, turn: int, step: int, slot: _Slot, out: ToolOutput | None, error: dict[str, Any] | None
) -> None:
    call_id = slot.block["id"]
    data: dict[str, Any] = {"turn": turn, "step": step, "callId": call_id}
    if error is not None:
        if error["code"] == "ABORTED_BEFORE_DISPATCH":
            text = TEXTS["T-ABORTED-BEFORE-DISPATCH"]
        else:
            text = render("T-TOOL-ERROR", code=error["code"], message=error["message"])
        data["message"] = tool_result_message(call_id, text, is_error=True)
        data["error"] = error
    else:
        assert out is not None
        data["message"] = tool_result_message(call_id, out.text, is_error=False)
        if out.value is not None:
            data["value"] = out.value
    agent.session.append("tool/result", data)
    if slot.exec is not None:
        for message in slot.exec.staged:
            agent.inject(message)
