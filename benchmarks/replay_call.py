"""Median overhead of one replayed model call with persistence on (issue: foundation).

Runs one root agent over a replay script of N text replies; each followup is one turn with one model
call, through the real loop and the JSONL store (write-behind, pre-step and model-request
checkpoints). Prints µs per call (median and p90 over per-turn timings) with and without fsync.

    python benchmarks/replay_call.py [--calls 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.models import ReplayProvider
from dsh.loader.session import SessionStore, make_header
from dsh.loader.transcripts import load_transcript


async def measure(calls: int, fsync: bool, batch_delay_ms: int) -> list[float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        replies = [{"text": f"reply {i}"} for i in range(calls)]
        path.write_text(json.dumps({"version": 1, "name": "bench", "task": "x", "agents": {"root": {"replies": replies}}}))
        provider = ReplayProvider(load_transcript(path))
        store = SessionStore(Path(tmp) / "home", batch_delay_ms=batch_delay_ms, fsync=fsync)
        session = await store.create(make_header("session-bench"))
        provider.bind_root(session.id)
        agent = Agent(session, store=store, provider=provider, options=AgentOptions())
        timings: list[float] = []
        for i in range(calls):
            start = time.perf_counter()
            agent.followup(user_message(f"prompt {i}"))
            await agent.when_idle()
            timings.append((time.perf_counter() - start) * 1e6)
        await agent.dispose()
        return timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    for fsync in (False, True):
        for delay in (0, 200):
            timings = asyncio.run(measure(args.calls, fsync, delay))
            q = statistics.quantiles(timings, n=10)
            print(
                f"fsync={str(fsync).lower():5} batchDelayMs={delay:3}  calls={len(timings)}  "
                f"median={statistics.median(timings):8.1f} µs/call  p90={q[-1]:8.1f} µs"
            )


if __name__ == "__main__":
    main()
