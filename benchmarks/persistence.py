"""Persistence against the write floor (issue 13 row 7).

The events are those of a real fan-out: N child sessions of 7 events each plus a root, taken from
the log shapes a `dsh run --transcript` fan-out writes. Both sides write the same bytes to the same
number of files in the same number of barriers (rounds): each round appends one event to every
session and then makes all of them durable.

- store: the real `SessionStore` as a replay run builds it (inline I/O, SPEC §26 item 1): `create`
  for every session, then per round `Session.append` on every session and `flush` of all of them
  (the checkpoint barriers of one loop iteration), then `close`. The flushes are awaited one after
  another, as each agent awaits its own checkpoint in the task it already runs in: the store's
  next-iteration write of every dirty session asks for one group sync, so a round is still one
  barrier (the store counts its syncs: printed). `--gather` drives them as `asyncio.gather` of
  one task per flush instead (the figure before issue 13's last change): those tasks are the
  driver's, not the store's, but both are printed.
- floor: a bare loop with pre-encoded lines: `mkdir`, `open` and header write per session, then per
  round one `write` per session and, with fsync, one `syncfs` (the cheapest durable group commit the
  kernel offers; per-file fsync would only make the floor slower), then `close`. The ratio is to
  this floor. Beside it: the same loop serializing each event (`encode_line`) inside the timing,
  as any writer of events given as data must.

    python benchmarks/persistence.py [--sessions 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dsh.loader.session import SessionStore, make_header
from dsh.loader.session.envelope import encode_line

_libc = ctypes.CDLL(None, use_errno=True)


def events_of(i: int) -> list[tuple[str, dict]]:
    """A child's log as a fan-out writes it: prompt inserted, one turn, one step, one reply."""
    msg = {"id": f"m-{i}", "role": "user", "content": [{"type": "text", "text": f"Reply with W{i}_DONE."}],
           "source": {"kind": "coordinator", "form": "relay", "senderSessionId": "session-root"}}
    reply = {"id": f"a-{i}", "role": "assistant", "content": [{"type": "text", "text": f"W{i}_DONE"}],
             "source": {"kind": "model", "provider": "replay", "model": "replay"}}
    return [
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [msg]}),
        ("turn/start", {"turn": 1}),
        ("agent/inbox/spliced", {"target": "next-turn", "start": 0, "inserted": [], "removedCount": 1}),
        ("step/start", {"turn": 1, "step": 1}),
        ("user/message", msg),
        ("assistant/message", {"turn": 1, "step": 1, "message": reply, "finish": "stop"}),
        ("step/end", {"turn": 1, "step": 1}),
        ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}),
    ]


async def store_run(home: Path, n: int, fsync: bool, gather: bool = False) -> tuple[float, int]:
    store = SessionStore(home, batch_delay_ms=0, fsync=fsync, inline_io=True, clock=lambda: 1)
    logs = [events_of(i) for i in range(n)]
    start = time.perf_counter()
    sessions = await asyncio.gather(*(store.create(make_header(f"s-{i}", created_at=1)) for i in range(n)))
    for r in range(len(logs[0])):
        for session, log in zip(sessions, logs):
            session.append(*log[r])
        if gather:
            await asyncio.gather(*(store.flush(s) for s in sessions))
        else:
            for s in sessions:
                await store.flush(s)
    await asyncio.gather(*(store.close(s) for s in sessions))
    return time.perf_counter() - start, store._sync.groups


def floor_run(home: Path, n: int, fsync: bool, encode: bool = False) -> float:
    """The bare loop; `encode`: it also serializes each event as it goes (the store must: its
    events arrive as data), the figure printed beside the main floor, which writes pre-encoded lines."""
    headers = [encode_line(make_header(f"s-{i}", created_at=1)) for i in range(n)]
    logs = [events_of(i) for i in range(n)]
    start = 0.0
    if not encode:
        lines = [[encode_line({"type": t, "seq": seq, "time": 1, "data": d}) for seq, (t, d) in enumerate(log)]
                 for log in logs]
        start = time.perf_counter()
    else:
        start = time.perf_counter()
        lines = [[encode_line({"type": t, "seq": seq, "time": 1, "data": d}) for seq, (t, d) in enumerate(log)]
                 for log in logs]
    sessions = home / "sessions"
    sessions.mkdir(parents=True)
    fds = []
    for i in range(n):
        directory = sessions / f"s-{i}"
        os.mkdir(directory, 0o700)
        fd = os.open(directory / "session.jsonl", os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_APPEND, 0o600)
        os.write(fd, headers[i])
        fds.append(fd)
    if fsync:
        _libc.syncfs(fds[0])
    for r in range(len(lines[0])):
        for fd, log in zip(fds, lines):
            os.write(fd, log[r])
        if fsync:
            _libc.syncfs(fds[0])
    for fd in fds:
        os.close(fd)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--gather", action="store_true", help="one task per flush (asyncio.gather)")
    args = parser.parse_args()
    load = os.getloadavg()
    driver = "gather: a task per flush" if args.gather else "each flush awaited in turn"
    print(f"persistence vs write floor, {args.sessions} sessions x 8 events, 8 barriers, runs={args.repeat}, "
          f"driver: {driver}, loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for fsync in (False, True):
        stores, floors, encoding, syncs = [], [], [], set()
        for r in range(args.repeat):  # interleaved
            with tempfile.TemporaryDirectory(prefix="dsh-persist-", dir=os.environ.get("BENCH_DIR")) as tmp:
                floors.append(floor_run(Path(tmp) / "floor", args.sessions, fsync))
                encoding.append(floor_run(Path(tmp) / "floor-encoding", args.sessions, fsync, encode=True))
                took, groups = asyncio.run(store_run(Path(tmp) / "store", args.sessions, fsync, args.gather))
                stores.append(took)
                syncs.add(groups)
                shutil.rmtree(tmp, ignore_errors=True)
        s, f = statistics.median(stores), statistics.median(floors)
        counted = f"store syncs {'/'.join(map(str, sorted(syncs)))}, floor {9 if fsync else 0}"
        print(f"fsync={str(fsync).lower():5}  store median {s:6.3f}s  floor median {f:6.3f}s  ratio {s / f:5.2f}x  "
              f"(store min {min(stores):.3f}s, floor min {min(floors):.3f}s; {counted}); "
              f"floor encoding as it writes {statistics.median(encoding):.3f}s, ratio {s / statistics.median(encoding):.2f}x")


if __name__ == "__main__":
    main()
