"""Driver, turns and steps (SPEC §6.6–§6.8, canonical order §6.11).

`open_turn` runs inside span S1 (from `Agent.send`) or synchronously between two turns of one
driver; everything after it is awaited by the driver task. A turn ends with exactly one `turn/end`
(written in `finally`), and a step with exactly one `step/end`, so the log always balances.
A step that streams its reply reads it through `stream_read.read_stream`.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, assert_never

from dsh.loader.abort import AbortController, Aborted, AbortSignal
from dsh.loader.agent.inbox import Message, Target
from dsh.loader.agent.messages import assistant_message
from dsh.loader.agent.phase import PreStep, Running
from dsh.loader.agent.stream_read import read_stream
from dsh.loader.agent.tool_exec import execute_tools
from dsh.loader.errors import DshError, ProviderError, StepLimit, error_chain
from dsh.loader.models import Assembler, ModelRequest
from dsh.loader.session import ErrorData, TurnEnd, step_text, turn_end_text, turn_text
from dsh.loader.texts import render

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent
    from dsh.loader.agent.tooling import ToolParameters

__all__ = ["OpenedTurn", "drive", "open_turn"]

logger = logging.getLogger(__name__)


@dataclass
class OpenedTurn:
    turn: int
    claimed: list[Message]


def _running(agent: Agent) -> Running:
    phase = agent.phase
    assert isinstance(phase, Running), f"{agent.id} is not running"
    return phase


def open_turn(agent: Agent) -> OpenedTurn:
    """§6.7 steps 1–3 plus the first claim; synchronous."""
    phase = agent.phase
    assert isinstance(phase, Running), f"{agent.id} is not running"
    signal = phase.abort.signal
    if signal.aborted:  # e.g. a status listener cancelled: no turn at all
        raise Aborted(signal.reason)
    turn = phase.turn + 1
    try:
        agent.session.append_encoded("turn/start", {"turn": turn}, turn_text(turn))
    except Exception as exc:
        _emit_error(agent, turn, 0, _error_data(exc))
        raise
    phase.turn = turn
    try:
        claimed = agent.inbox.claim("next-turn", turn)
    except Exception as exc:
        _end_turn(agent, turn, {"kind": "error", "error": _error_data(exc)})
        raise
    return OpenedTurn(turn=turn, claimed=claimed)


async def drive(agent: Agent, opened: OpenedTurn | BaseException) -> None:
    try:
        if isinstance(opened, BaseException):
            raise opened
        more = await _run_turn(agent, opened)
        while more:
            # A normally finished turn with pending input: next turn, same driver, no idle edge.
            phase = _running(agent)
            phase.abort = AbortController()
            phase.step = 0
            phase.wake_requested = False
            more = await _run_turn(agent, open_turn(agent))
    except Exception as exc:  # every failure stops the driver here; the turn already ended
        # Not BaseException: the task's own CancelledError (a hard stop), KeyboardInterrupt and
        # SystemExit propagate; `finally` still converges the agent.
        logger.debug("driver of %s stopped: %r", agent.id, exc)
    finally:
        final = agent.phase
        turn = final.turn if isinstance(final, Running) else getattr(final, "last_turn", 0)
        wake = final.wake_requested if isinstance(final, Running) else False
        agent.converge(turn, wake)


# A turn that ends with no recorded reason is a bug in this module; the log still balances.
_NO_REASON: TurnEnd = {"kind": "error", "error": {"code": "UNKNOWN", "message": "turn ended without a reason"}}


def _outlasts_later_steps(end: TurnEnd) -> bool:
    """Whether a step's end stays the turn's end when steered input runs further steps.

    A step that hit the token limit left its answer unfinished; a later step completing must not
    turn that into `completed`. Every other kind is replaced by the last step's.
    """
    match end["kind"]:
        case "max-tokens":
            return True
        case "completed" | "aborted" | "blocked" | "error" | "interrupted":
            return False
        case unreachable:
            assert_never(unreachable)


async def _run_turn(agent: Agent, opened: OpenedTurn) -> bool:
    phase = agent.phase
    assert isinstance(phase, Running), f"{agent.id} is not running"
    signal = phase.abort.signal
    turn = opened.turn
    turn_ends: TurnEnd | None = None
    claimed: list[Message] | None = opened.claimed
    target: Target = "next-turn"
    session, inbox = agent.session, agent.inbox
    # The abort checks are inline (`if signal.aborted: raise ...`, issue 13: a call each, eight per
    # model call); they are `signal.throw_if_aborted()`.
    try:
        while True:
            if signal.aborted:
                raise Aborted(signal.reason)
            step = phase.step + 1
            if claimed is None:
                claimed = inbox.claim(target, turn)
            entered, claimed = claimed, None
            ctx = PreStep(agent=agent, turn=turn, step=step, claimed=entered, signal=signal)
            rejected = False
            for hook in agent.pre_step.listeners():
                if await hook(ctx) == "reject":
                    rejected = True
                    break
            if signal.aborted:
                raise Aborted(signal.reason)
            if rejected:
                turn_ends = {"kind": "blocked"}
                return False
            if turn_ends is not None and not entered:
                break
            if phase.step == 0 and not entered:
                turn_ends = {"kind": "completed"}
                return False
            session.append_encoded("step/start", {"turn": turn, "step": step}, step_text(turn, step))
            phase.step = step
            try:
                for message in entered:
                    text = inbox.entry_text(message)  # its splice's text: no second encode
                    if text is None:
                        session.append("user/message", message)
                    else:
                        session.append_encoded("user/message", message, text)
                end = await _run_step(agent, turn, step, signal)
                if turn_ends is None or not _outlasts_later_steps(turn_ends):
                    turn_ends = end
            finally:
                session.append_encoded("step/end", {"turn": turn, "step": step}, step_text(turn, step))
            if signal.aborted:
                raise Aborted(signal.reason)
            if turn_ends is not None and not inbox.lists["next-step"]:
                break
            if phase.step >= agent.options.max_steps_per_turn:
                raise StepLimit(agent.options.max_steps_per_turn)
            target = "next-step"
    except BaseException as exc:
        if signal.aborted:
            turn_ends = {"kind": "aborted", "reason": signal.reason}
        else:
            error = _error_data(exc)
            turn_ends = {"kind": "error", "error": error}
            _emit_error(agent, turn, phase.step, error)
        raise
    finally:
        _end_turn(agent, turn, turn_ends or _NO_REASON)
    return inbox.has_pending


async def _run_step(agent: Agent, turn: int, step: int, signal: AbortSignal) -> TurnEnd | None:
    if signal.aborted:
        raise Aborted(signal.reason)
    options = agent.options
    tools = agent.tools
    sections = [options.system_prompt]
    for tool in tools:
        section = tool.system_section
        if section and section not in sections:
            sections.append(section)
    # The messages are copied only for a provider that reads them (`_read_stream`); a reply served
    # whole (`ready`) needs none, and the copy grew with history (issue 13).
    derived = agent.session.derived_messages()
    message_count = len(derived)
    request = ModelRequest(
        session_id=agent.id,
        turn=turn,
        step=step,
        system="\n\n".join(sections),
        messages=[],
        tools=[{"name": t.name, "description": t.description, "parameters": _schema(t.parameters)} for t in tools]
        if tools else [],
        model=options.model,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
    )
    # What the model saw (issue 11 item 1): durable with the checkpoint, before the provider runs.
    digest = agent.requests.record(turn=turn, step=step, model=request.model, system=request.system,
                                   tools=request.tools, message_count=message_count)
    debug = logger.isEnabledFor(logging.DEBUG)
    if debug:
        logger.debug(render("T-LOG-REQUEST", id=agent.id, turn=turn, step=step, model=request.model,
                            messages=message_count, system=digest["systemHash"],
                            tools=",".join(digest["toolNames"]) or "-", toolsHash=digest["toolsHash"]))
    await agent.store.flush(agent.session)  # model-request checkpoint (§5.5)
    if signal.aborted:
        raise Aborted(signal.reason)

    def on_retry(attempt: int, delay_ms: int, code: str, status: int | None) -> None:
        data: dict[str, Any] = {"turn": turn, "step": step, "attempt": attempt, "delayMs": delay_ms, "code": code}
        if status is not None:
            data["status"] = status
        agent.session.append_owned("llm/retry", data)

    assembler = Assembler()
    ready = getattr(agent.provider, "ready", None)  # the replay provider; its request has no messages
    served = ready(request, signal) if ready is not None else None
    if served is not None:  # the whole reply, served without a suspension: no stream, no reads
        chunks, error = served
        assembler.feed_all(chunks)
        if error is not None:
            raise error
    else:
        request.messages = derived[:message_count]  # the list as it was when the request was made
        await read_stream(agent, turn, step, request, signal, on_retry, assembler)
    result = assembler.result()
    content = result.content
    if result.finish == "max-tokens":
        content = [b for b in content if b.get("type") != "tool-call"]
    data: dict[str, Any] = {"turn": turn, "step": step, "message": assistant_message(agent, content)}
    if result.usage is not None:
        data["usage"] = result.usage
    data["finish"] = result.finish
    # Owned (issue 13: no decoded copy): every container here is fresh, built by the assembler and
    # `assistant_message`; the leaves are the chunks' typed `str`/`int` fields, and nobody changes
    # the blocks afterwards (tool execution reads them).
    agent.session.append_owned("assistant/message", data)
    if debug:
        usage = result.usage or {}
        logger.debug(render("T-LOG-RESPONSE", id=agent.id, turn=turn, step=step, finish=result.finish,
                            blocks=_block_summary(content), input=usage.get("inputTokens", "-"),
                            output=usage.get("outputTokens", "-")))
    if result.finish == "max-tokens":
        return {"kind": "max-tokens"}
    for block in content:
        if block.get("type") == "tool-call":
            break
    else:  # no tool call (issue 13: most replies; no list built for them)
        return {"kind": "completed"}
    calls = [b for b in content if b.get("type") == "tool-call"]
    concluded = await execute_tools(agent, turn, step, calls, signal)
    return {"kind": "completed"} if concluded else None


@functools.lru_cache(maxsize=256)
def _schema(parameters: ToolParameters) -> dict[str, Any]:
    """A tool's JSON schema, built once per parameter model: generating it costs ~150 µs, paid on
    every step of every agent otherwise. Callers must not mutate the returned mapping."""
    return parameters.model_json_schema()


def _block_summary(content: list[dict[str, Any]]) -> str:
    """`text,tool-call:subagent`: block types (and tool names) of a reply, never their text."""
    parts = [f"{b.get('type')}:{b.get('name')}" if b.get("type") == "tool-call" else str(b.get("type")) for b in content]
    return ",".join(parts) or "-"


def _error_data(exc: BaseException) -> ErrorData:
    if isinstance(exc, DshError):
        data: ErrorData = {"code": exc.code, "message": exc.message}
        if isinstance(exc, ProviderError) and exc.status is not None:
            data["status"] = exc.status
        return data
    return {"code": "UNKNOWN", "message": error_chain(exc)}


def _emit_error(agent: Agent, turn: int, step: int, error: ErrorData) -> None:
    agent.events.emit("agent/error", {"agent": agent.id, "turn": turn, "step": step, "error": error})


_FRESH_ENDS = frozenset({"completed", "max-tokens", "blocked"})


def _end_turn(agent: Agent, turn: int, reason: TurnEnd) -> None:
    try:
        kind = reason["kind"]
        if kind in _FRESH_ENDS:  # a literal made for this turn: nothing else holds it
            if len(reason) == 1:  # only its kind: the text is formatted, not encoded
                agent.session.append_encoded("turn/end", {"turn": turn, "reason": reason}, turn_end_text(turn, kind))
            else:
                agent.session.append_owned("turn/end", {"turn": turn, "reason": reason})
        else:  # an abort's cause or an error's data may be shared, or come from outside
            agent.session.append("turn/end", {"turn": turn, "reason": reason})
    except Exception:
        logger.exception("could not log turn/end %s of %s", turn, agent.id)
