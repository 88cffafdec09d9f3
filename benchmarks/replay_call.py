"""Cost of one replayed model call with persistence on, and how it grows with history (issue 13 row 2).

Runs one root agent over a replay script of N text replies; each followup is one turn with one model
call, through the real loop and the JSONL store (write-behind, pre-step and model-request
checkpoints). Per configuration it prints the whole conversation's time, µs per call (median, p90),
the mean of the last decile of calls over the mean of the first (flat history cost means ~1), and
the same-run write floor: the session's own bytes written by a bare loop in the same number of
barriers (two per call, the pre-step and model-request checkpoints), fsynced when fsync is on.

Beside it, the **rule floor** (branch `pfloor`): the minimum per-call work SPEC §5.4/§5.5 require,
in a bare loop without the runtime, over the same session's events (decoded before the clock
starts): per call its 9 events encoded (one reused C encoder) and written in 3 writes, cut where the
rules cut them (the write-behind batch of the turn's opening, the model-request checkpoint before
the provider, the write-behind batch of the turn's end), each write after the truncate rule's
`fstat` check through the held descriptor, and fsynced when fsync is on. Printed as CPU µs per
call (the least of the rounds) next to the runtime's median, and the ratio.

    python benchmarks/replay_call.py [--calls 100,1000,3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from dsh.loader.agent import Agent, AgentOptions, user_message
from dsh.loader.models import ReplayProvider
from dsh.loader.session import SessionStore, make_header
from dsh.loader.transcripts import load_transcript


async def measure(calls: int, fsync: bool, batch_delay_ms: int, inline: bool) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.yaml"
        replies = [{"text": f"reply {i}"} for i in range(calls)]
        path.write_text(json.dumps({"version": 1, "name": "bench", "task": "x", "agents": {"root": {"replies": replies}}}))
        provider = ReplayProvider(load_transcript(path))
        store = SessionStore(Path(tmp) / "home", batch_delay_ms=batch_delay_ms, fsync=fsync, inline_io=inline)
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
        source = store.path(session.id)
        floor = write_floor(source, Path(tmp) / "floor.jsonl", calls, fsync)
        return timings, floor, rule_floor(source, Path(tmp) / "rule-floor.jsonl", fsync)


def write_floor(source: Path, target: Path, calls: int, fsync: bool) -> float:
    """Seconds a bare loop takes to append `source`'s lines in 2 batches per call (+ fsync each)."""
    lines = source.read_bytes().splitlines(keepends=True)
    header, events = lines[0], lines[1:]
    per_batch = max(1, len(events) // (2 * calls))
    batches = [b"".join(events[i : i + per_batch]) for i in range(0, len(events), per_batch)]
    start = time.perf_counter()
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        os.write(fd, header)
        for batch in batches:
            os.write(fd, batch)
            if fsync:
                os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


_C_ENCODE = json.encoder.c_make_encoder(  # type: ignore[attr-defined]
    {}, None, json.encoder.encode_basestring, None, ":", ",", False, False, False
)


def rule_floor(source: Path, target: Path, fsync: bool) -> float:
    """CPU seconds the rules' own per-call work takes for `source`'s events (module docstring):
    CPU (`process_time`), not wall, so a shared machine's preemption does not land in the floor."""
    lines = source.read_bytes().splitlines(keepends=True)
    header, events = lines[0], [json.loads(line) for line in lines[1:]]
    batches: list[list[dict]] = [[]]
    for event in events:
        if event["type"] in ("step/start", "assistant/message") and batches[-1]:
            batches.append([])
        batches[-1].append(event)
        if event["type"] == "turn/end":
            batches.append([])
    batches = [b for b in batches if b]
    start = time.process_time()
    fd = os.open(target, os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        os.write(fd, header)
        size = len(header)
        for batch in batches:
            data = b"".join([("".join(_C_ENCODE(e, 0)) + "\n").encode() for e in batch])
            if os.fstat(fd).st_size != size:  # the truncate rule's check
                raise SystemExit("unconfirmed bytes")
            os.write(fd, data)
            size += len(data)
            if fsync:
                os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.process_time() - start
    if target.read_bytes() != source.read_bytes():  # the same bytes, or the floor is wrong
        raise SystemExit(f"rule floor wrote other bytes than {source}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", default="100,1000,3000", help="comma-separated conversation lengths")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--fsync", choices=["both", "on", "off"], default="both")
    parser.add_argument(
        "--io", choices=["inline", "thread"], default="inline",
        help="inline: the store as `dsh run --transcript` builds it (SPEC §26 item 1); thread: as a live run",
    )
    args = parser.parse_args()
    sizes = [int(x) for x in args.calls.split(",")]
    fsyncs = {"both": (False, True), "on": (True,), "off": (False,)}[args.fsync]
    load = os.getloadavg()
    print(f"replayed model calls, one conversation, runs={args.repeat}, loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    inline = args.io == "inline"
    delays = (0,) if inline else (0, 200)  # inline ignores the delay: next loop iteration (§26 item 1)
    for fsync in fsyncs:
        for delay in delays:
            results: dict[int, list[tuple[list[float], float, float]]] = {n: [] for n in sizes}
            for _ in range(args.repeat):
                for n in sizes:  # interleaved
                    results[n].append(asyncio.run(measure(n, fsync, delay, inline)))
            for n in sizes:
                totals = [sum(t) / 1e6 for t, _, _ in results[n]]
                medians = [statistics.median(t) for t, _, _ in results[n]]
                decile = max(1, n // 10)
                growth = [statistics.fmean(t[-decile:]) / statistics.fmean(t[:decile]) for t, _, _ in results[n]]
                p90 = [statistics.quantiles(t, n=10)[-1] for t, _, _ in results[n]]
                floor = statistics.median(f for _, f, _ in results[n])
                rule = min(r for _, _, r in results[n]) / n * 1e6  # CPU: the min is the least disturbed
                median = statistics.median(medians)
                total = statistics.median(totals)
                print(
                    f"io={args.io} fsync={str(fsync).lower():5} batchDelayMs={delay:3}  calls={n:5}  "
                    f"total {total:7.3f}s  median {median:8.1f} µs/call  "
                    f"p90 {statistics.median(p90):8.1f} µs  last/first decile {statistics.median(growth):5.2f}  "
                    f"write floor {floor:7.3f}s  x floor {total / floor:6.1f}  "
                    f"rule floor {rule:6.1f} µs/call cpu  median x rule floor {median / rule:5.1f}"
                )


if __name__ == "__main__":
    main()
