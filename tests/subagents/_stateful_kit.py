"""Seams and log readers for the stateful interleaving test (`test_stateful.py`, issue 14 item 4).

- `GateProvider`: a `ModelProvider` whose every request hangs until the test releases it with a
  reply (text, tool calls, max-tokens or a provider error) or the turn's signal aborts. It is the
  model seam, not the unit under test: every agent, tool and manager path behind it is real.
- `InlineExecutor`: the loop's default executor runs each `asyncio.to_thread` call at once on the
  loop thread. The store's file I/O then completes in the next loop iteration instead of at thread
  timing, so one drawn rule sequence always gives one interleaving (hypothesis replays and shrinks
  examples; a schedule that depended on thread timing would make every failure flaky; SPEC §26 item 1
  asks the same of replay runs).
- `ledger(events)`: replays a log's inbox splices and steps into the facts the invariants read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.errors import ProviderError
from dsh.loader.models import Chunk, Finish, ModelRequest, TextDelta, ToolCallDelta, Usage

__all__ = ["Call", "GateProvider", "InlineExecutor", "Ledger", "ledger", "reply_error", "reply_text", "reply_tools"]


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """Runs submitted calls synchronously; the awaiting task resumes one loop iteration later.
    (A ThreadPoolExecutor only because `set_default_executor` demands one; it never starts a thread.)"""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


# -- replies ----------------------------------------------------------------------------------------
Reply = list[Chunk] | ProviderError
_USAGE = Usage(input_tokens=10, output_tokens=5)


def reply_text(text: str, finish: str = "stop") -> Reply:
    return [TextDelta(text), _USAGE, Finish(finish)]  # type: ignore[arg-type]


def reply_tools(*calls: tuple[str, str, dict[str, Any]]) -> Reply:
    """`(call_id, tool_name, arguments)` per call, in model order."""
    chunks: list[Chunk] = [
        ToolCallDelta(i, call_id, name, json.dumps(args, separators=(",", ":")))
        for i, (call_id, name, args) in enumerate(calls)
    ]
    return [*chunks, _USAGE, Finish("tool-calls")]


def reply_error() -> Reply:
    return ProviderError("SERVER_ERROR", "scripted provider failure", status=500)


@dataclass(eq=False)
class Call:
    """One model request, hanging until `reply` is set or `signal` aborts."""

    key: str
    session_id: str
    turn: int
    step: int
    signal: AbortSignal
    reply: asyncio.Future[Reply]

    @property
    def waiting(self) -> bool:
        return not self.signal.aborted and not self.reply.done()


class GateProvider:
    """Binds sessions to script keys (`R` for the root; a child by its `spawn-<key>` call id) and
    parks every request of a key in `calls[key]` until `release(key, reply)`."""

    name = "gate"

    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.calls: dict[str, Call] = {}
        self.problems: list[str] = []  # seam misuse; an invariant requires it to stay empty
        self.served = 0

    def bind_root(self, session_id: str) -> None:
        self.keys[session_id] = "R"

    def bind_child(self, session_id: str, descriptor: dict[str, Any]) -> None:
        call_id = str(descriptor.get("spawnCallId", ""))
        if call_id.startswith("spawn-"):
            self.keys.setdefault(session_id, call_id.removeprefix("spawn-"))

    def waiting(self, key: str) -> Call | None:
        call = self.calls.get(key)
        return call if call is not None and call.waiting else None

    def release(self, key: str, reply: Reply) -> None:
        call = self.waiting(key)
        assert call is not None, f"{key} has no hanging request"
        call.reply.set_result(reply)

    async def stream(self, request: ModelRequest, signal: AbortSignal, on_retry: Any) -> AsyncIterator[Chunk]:
        signal.throw_if_aborted()
        key = self.keys.get(request.session_id)
        if key is None or key in self.calls:
            self.problems.append(f"unexpected request from {request.session_id} ({key})")
            raise ProviderError("UNEXPECTED", "the gate provider cannot serve this request")
        call = Call(key, request.session_id, request.turn, request.step, signal,
                    asyncio.get_running_loop().create_future())
        self.calls[key] = call
        self.served += 1
        try:
            # The hang: nothing is sent until the test releases it or the turn aborts.
            await asyncio.wait({call.reply, signal.wait()}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if self.calls.get(key) is call:
                del self.calls[key]
        if not call.reply.done():
            raise Aborted(signal.reason)
        reply = call.reply.result()
        if isinstance(reply, ProviderError):
            raise reply
        for chunk in reply:
            yield chunk

    async def aclose(self) -> None:
        return None


# -- the inbox and step ledger of one log -----------------------------------------------------------
@dataclass
class Ledger:
    """What a log says happened to every message that entered an inbox (SPEC §6.5, §6.7)."""

    inserted: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> message
    inserts: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (target, message), log order
    claimed: dict[str, int] = field(default_factory=dict)  # id -> claims
    entered: dict[str, int] = field(default_factory=dict)  # id -> user/message events
    canceled: set[str] = field(default_factory=set)
    pending: dict[str, list[str]] = field(default_factory=lambda: {"next-turn": [], "next-step": []})
    unentered: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (id, turn, turn end)
    problems: list[str] = field(default_factory=list)

    def lost(self) -> list[str]:
        """Inserted ids that are neither pending, entered into a step, nor removed by a canceled splice."""
        waiting = {i for ids in self.pending.values() for i in ids}
        return [i for i in self.inserted if i not in waiting and i not in self.entered and i not in self.canceled]


def ledger(events: list[dict[str, Any]]) -> Ledger:
    led = Ledger()
    lists: dict[str, list[dict[str, Any]]] = {"next-turn": [], "next-step": []}
    batch: list[str] = []  # claimed since the last step/start: the next step must enter exactly these
    expect: list[str] = []  # the batch the open step has not entered yet
    for e in events:
        kind, data, seq = e["type"], e["data"], e["seq"]
        if expect and kind != "user/message":
            led.problems.append(f"seq {seq}: step entered fewer messages than claimed: {expect}")
            expect = []
        if kind == "agent/inbox/spliced":
            items = lists[data["target"]]
            count = data.get("removedCount", 0)
            removed = items[data["start"] : data["start"] + count]
            if count and data.get("outcome") == "canceled":
                led.canceled.update(m["id"] for m in removed)
            elif count:
                if data["start"] != 0:  # FIFO: a claim takes the head of its queue
                    led.problems.append(f"seq {seq}: claim from index {data['start']} of {data['target']}")
                for m in removed:
                    led.claimed[m["id"]] = led.claimed.get(m["id"], 0) + 1
                    batch.append(m["id"])
            for m in data["inserted"]:
                if m["id"] in led.inserted:
                    led.problems.append(f"seq {seq}: message {m['id']} inserted twice")
                led.inserted[m["id"]] = m
                led.inserts.append((data["target"], m))
            items[data["start"] : data["start"] + count] = data["inserted"]
        elif kind == "step/start":
            expect, batch = batch, []
        elif kind == "user/message":
            mid = data["id"]
            led.entered[mid] = led.entered.get(mid, 0) + 1
            if not expect or expect[0] != mid:
                led.problems.append(f"seq {seq}: entered {mid}, claimed order expected {expect[:1]}")
            else:
                expect.pop(0)
        elif kind == "turn/end":
            led.unentered.extend((mid, data["turn"], data["reason"]) for mid in batch)
            batch = []
    if expect:
        led.problems.append(f"log ends inside a step that has not entered {expect}")
    led.pending = {t: [m["id"] for m in ms] for t, ms in lists.items()}
    return led
