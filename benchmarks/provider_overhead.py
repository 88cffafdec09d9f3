"""Added per-request cost of the OpenAI-compatible provider over the replay provider (issue: real provider).

The harness of `replay_call.py`: one root agent, N followups, each one turn with one model call,
through the real loop and the JSONL store (no write-behind delay, no fsync, so the store adds as
little as possible to both sides). The same conversation is served twice:

- `replay`: `ReplayProvider` over a transcript of N text replies;
- `openai-compatible (respx)`: `OpenAICompatibleProvider` with its own `httpx.AsyncClient`, against a
  respx route that answers each request with the SSE body the replay reply stands for (one text
  delta, `finish_reason: stop`, a usage chunk, `[DONE]`).

A third row serves the same bodies through `httpx.MockTransport` instead of respx, to show how much
of the difference is respx's own routing rather than the provider. The provider's share is building
and JSON-encoding the request body (the whole conversation, so it grows with N: the first and last
decile medians are printed apart), httpx's request/response machinery, and SSE parsing.

    python benchmarks/provider_overhead.py [--calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import respx

from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.models import ModelProvider, OpenAICompatibleProvider, ReplayProvider
from dsh.loader.session import SessionStore, make_header
from dsh.loader.transcripts import load_transcript

BASE = "https://llm.bench.test"
URL = f"{BASE}/chat/completions"
SSE_HEADERS = {"content-type": "text/event-stream"}


def sse_body(i: int) -> bytes:
    """What replay reply `{text: "reply i"}` stands for: one delta, usage 10/5, finish stop."""
    events: list[dict[str, Any] | str] = [
        {"choices": [{"index": 0, "delta": {"content": f"reply {i}"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
        "[DONE]",
    ]
    return "".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n" for e in events).encode()


def responder() -> Callable[[httpx.Request], httpx.Response]:
    served = 0

    def respond(request: httpx.Request) -> httpx.Response:
        nonlocal served
        response = httpx.Response(200, headers=SSE_HEADERS, content=sse_body(served))
        served += 1
        return response

    return respond


async def turns(provider: ModelProvider, calls: int, tmp: Path, bind: Callable[[str], None] | None) -> list[float]:
    store = SessionStore(tmp / "home", batch_delay_ms=0, fsync=False)
    session = await store.create(make_header(f"session-bench-{provider.name}"))
    if bind is not None:
        bind(session.id)
    agent = Agent(session, store=store, provider=provider, options=AgentOptions())
    timings: list[float] = []
    try:
        for i in range(calls):
            start = time.perf_counter()
            agent.followup(user_message(f"prompt {i}"))
            await agent.when_idle()
            timings.append((time.perf_counter() - start) * 1e6)
        expected = f"reply {calls - 1}"
        last = [e for e in agent.session.events if e["type"] == "assistant/message"][-1]
        assert last["data"]["message"]["content"] == [{"type": "text", "text": expected}], last
    finally:
        await agent.dispose()
        await provider.aclose()
    return timings


async def measure(kind: str, calls: int) -> list[float]:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        if kind == "replay":
            path = tmp / "bench.yaml"
            replies = [{"text": f"reply {i}"} for i in range(calls)]
            path.write_text(json.dumps({"version": 1, "name": "bench", "task": "x",
                                        "agents": {"root": {"replies": replies}}}))
            replay = ReplayProvider(load_transcript(path))
            return await turns(replay, calls, tmp, replay.bind_root)
        if kind == "respx":
            with respx.mock(assert_all_mocked=True) as router:
                router.post(URL).mock(side_effect=responder())
                live = OpenAICompatibleProvider(base_url=BASE, model="deepseek-chat", api_key="sk-bench",
                                                max_attempts=1)
                return await turns(live, calls, tmp, None)
        client = httpx.AsyncClient(transport=httpx.MockTransport(responder()))
        try:
            live = OpenAICompatibleProvider(base_url=BASE, model="deepseek-chat", api_key="sk-bench",
                                            max_attempts=1, client=client)
            return await turns(live, calls, tmp, None)
        finally:
            await client.aclose()


ROWS = {"replay": "replay", "respx": "openai-compatible (respx)", "mock": "openai-compatible (MockTransport)"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    if args.calls < 20:
        parser.error("--calls must be at least 20")
    for kind in ROWS:  # warm-up: imports, first-use caches
        asyncio.run(measure(kind, 20))
    medians: dict[str, float] = {}
    firsts: dict[str, float] = {}
    for kind, label in ROWS.items():
        timings = asyncio.run(measure(kind, args.calls))
        decile = max(1, len(timings) // 10)
        medians[kind] = statistics.median(timings)
        firsts[kind] = statistics.median(timings[:decile])
        print(f"{label:34} calls={len(timings)}  median={medians[kind]:8.1f} µs/call  "
              f"first-10%={firsts[kind]:8.1f}  last-10%={statistics.median(timings[-decile:]):8.1f}")
    for kind in ("respx", "mock"):
        print(f"added over replay, {ROWS[kind]:34} median {medians[kind] - medians['replay']:+8.1f} µs/call  "
              f"(first 10%, short history: {firsts[kind] - firsts['replay']:+8.1f} µs/call)")


if __name__ == "__main__":
    main()
