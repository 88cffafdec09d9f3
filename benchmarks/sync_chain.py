"""What one durability sync costs on a disk, in a chain (issue 13 row 1's sync-chain argument).

A replay run's fan-out waits for its syncs one after another on the root's path (three per wave of
children: benchmarks/README.md, 2026-12-03). This loop appends one line and `syncfs`es, N times in
a row: the per-sync cost that chain pays, beside the same appends without a sync (its floor).

    python benchmarks/sync_chain.py [--syncs 312] [--repeat 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import time

_libc = ctypes.CDLL(None, use_errno=True)


def chain(directory: str, n: int, sync: bool) -> float:
    with tempfile.TemporaryDirectory(prefix="dsh-sync-", dir=directory) as tmp:
        fd = os.open(f"{tmp}/log", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
        try:
            start = time.perf_counter()
            for _ in range(n):
                os.write(fd, b"x" * 300 + b"\n")
                if sync and _libc.syncfs(fd) != 0:
                    raise OSError(ctypes.get_errno(), "syncfs failed")
            return time.perf_counter() - start
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--syncs", type=int, default=312)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    synced, bare = [], []
    for _ in range(args.repeat):  # interleaved
        synced.append(chain(args.dir, args.syncs, True))
        bare.append(chain(args.dir, args.syncs, False))
    s, b = statistics.median(synced), statistics.median(bare)
    load = os.getloadavg()
    print(f"{args.syncs} appends each followed by syncfs, in {args.dir}, runs={args.repeat}, loadavg {load[0]:.2f}: "
          f"median {s:.3f}s ({s / args.syncs * 1e3:.2f} ms per sync); floor, the appends alone {b * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
