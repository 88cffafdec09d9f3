"""Reading a provider's stream in the driver's step (SPEC §6.8, §13.1): each read raced against the
abort, so an abandoned read never delays the turn's end, and an aborted stream's partial answer kept
as an interrupted `assistant/message`. Split from `loop.py` (one concept per module): the loop asks
for the whole reply (`ready`) first and streams only when a provider cannot serve it whole.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.agent.messages import assistant_message
from dsh.loader.models import Assembler, ModelRequest

if TYPE_CHECKING:
    from dsh.loader.agent.agent import Agent

__all__ = ["read_stream"]

logger = logging.getLogger("dsh.loader.agent.loop")  # the driver's log, as before the split


async def read_stream(
    agent: Agent, turn: int, step: int, request: ModelRequest, signal: AbortSignal, on_retry: Any, assembler: Assembler,
) -> None:
    """Feed the provider's stream to `assembler`, each read raced against the abort (`_next_chunk`);
    an abort keeps the partial answer as an interrupted `assistant/message`."""
    inline_first = getattr(agent.provider, "reads_move_between_tasks", False) is True
    stream = agent.provider.stream(request, signal, on_retry)
    try:
        while True:
            chunk = await _next_chunk(stream, signal, inline_first)
            if chunk is None:
                break
            signal.throw_if_aborted()
            assembler.feed(chunk)
    except BaseException:
        if signal.aborted:
            partial = assembler.partial_content()
            if partial:
                agent.session.append(
                    "assistant/message",
                    {"turn": turn, "step": step, "message": assistant_message(agent, partial), "interrupted": True},
                )
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            try:
                await aclose()
            except Exception:
                logger.debug("closing the stream of %s failed", agent.id, exc_info=True)


_END = object()  # the stream ended (StopAsyncIteration) during a read's first step


def _first_step(stream: Any) -> tuple[bool, Any]:
    """Run the next read up to its first suspension, on this task; `(True, chunk)` if it finished.

    Why: a replayed read finishes without suspending (the chunks are already there), and racing
    such a read against the abort cost a task, a future and an `asyncio.wait` per chunk (issue 13).
    A read that did not finish suspended on a future, which `(False, (iterator, future))` hands to
    `_resume_read` to finish on its own task, raced as before. Nothing else runs between the read's
    start and its end here, so nothing can abort in between. Only for providers that declare
    `reads_move_between_tasks`: a read that enters task-bound state (httpx's anyio cancel scopes)
    must start and end on one task.
    """
    it = stream.__anext__().__await__()
    try:
        yielded = it.send(None)
    except StopIteration as stop:
        return True, stop.value
    except StopAsyncIteration:
        return True, None
    return False, (it, yielded)


@types.coroutine
def _forward(it: Any, yielded: Any) -> Generator[Any, Any, Any]:
    """`yield from it` for an await-iterator that has already yielded `yielded` (`_first_step`)."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            it.close()
            raise
        except BaseException as exc:  # the task's cancellation (or a throw) goes to the read
            try:
                yielded = it.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            yielded = it.send(sent)
        except StopIteration as stop:
            return stop.value


async def _resume_read(it: Any, yielded: Any) -> Any:
    try:
        return await _forward(it, yielded)
    except StopAsyncIteration:
        return None


async def _next_chunk(stream: Any, signal: AbortSignal, inline_first: bool = False) -> Any:
    """Race the next chunk against the abort: an abandoned read never delays the turn's end.
    With `inline_first`, the read starts on this task (`_first_step`)."""
    if signal.aborted:
        raise Aborted(signal.reason)
    if inline_first:
        finished, value = _first_step(stream)
        if finished:
            return value
        nxt: asyncio.Future[Any] = asyncio.ensure_future(_resume_read(*value))
    else:
        nxt = asyncio.ensure_future(anext(stream, None))
    waits: set[asyncio.Future[Any]] = {nxt, signal.wait()}
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        # This task itself is being cancelled (a hard stop): the read must not outlive it, and
        # the caller's aclose() must find the stream at rest, so end the read before re-raising.
        nxt.cancel()
        await asyncio.wait({nxt})
        raise
    if nxt in done:
        return nxt.result()
    nxt.cancel()  # abandon a read we no longer need; the caller closes the stream
    try:
        await nxt
    except asyncio.CancelledError:
        # The abandoned read's own cancellation is expected; a cancellation of this task that
        # arrived while we waited for the read to unwind is not ours to swallow.
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
    except Exception:
        logger.debug("an abandoned stream read failed while unwinding", exc_info=True)
    raise Aborted(signal.reason)
