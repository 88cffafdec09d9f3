#!/usr/bin/env python3
"""CPU time (user + sys, `getrusage`) of two commands, alternating which runs first in each pair, so
neither always runs right after the other (`cli_startup.sh` always runs "before" after "after").

Usage: python benchmarks/ab_cpu.py PAIRS BEFORE_EXE AFTER_EXE [ARG...]
  e.g. python benchmarks/ab_cpu.py 30 /tmp/nopyd-before-site/dsh-before /tmp/nopyd-after-site/dsh-after --help
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys


def main(argv: list[str]) -> int:
    pairs, before, after, *args = argv[1:]
    commands = {"before": [before, *args], "after": [after, *args]}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for i in range(int(pairs)):
        order = list(commands.items()) if i % 2 == 0 else list(reversed(commands.items()))
        for name, command in order:
            start = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            end = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append((end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime) * 1000)
    for name, values in cpu.items():
        print(f"{name:6} median cpu {statistics.median(values):7.1f} ms  min {min(values):7.1f} ms")
    print("load", open("/proc/loadavg").read().split()[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
