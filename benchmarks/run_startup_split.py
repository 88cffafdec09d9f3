#!/usr/bin/env python3
"""Where a `dsh run --transcript NAME` start-up goes (issue 13): import each layer in dependency
order with checkpoints, then run the command in-process (the prompt exit disabled), and print each
part's wall time and share. The cyclic collector is off throughout, as the console script has it
during start-up. Run it with the interpreter (and `PYTHONPATH`) of the dsh you measure.

Usage: python benchmarks/run_startup_split.py [TRANSCRIPT] [--repeat N]   (default background-settlement, 3)
"""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one(transcript: str) -> list[tuple[str, float]]:
    gc.disable()
    marks: list[tuple[str, float]] = []
    start = previous = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal previous
        now = time.perf_counter()
        marks.append((name, now - previous))
        previous = now

    import asyncio  # noqa: F401
    mark("asyncio (with ssl, concurrent.futures, logging)")
    import dsh.loader.config.lean  # noqa: F401
    import dsh.loader.transcripts  # noqa: F401
    import dsh.loader.transcripts.lean  # noqa: F401
    mark("dsh's lean schemas (config, transcripts), instead of pydantic and its models")
    import dsh.loader.config  # noqa: F401
    import dsh.loader.headless  # noqa: F401
    mark("dsh's runtime modules (headless and below)")
    import dsh.cli.logsetup  # noqa: F401
    import dsh.cli.run_command  # noqa: F401
    import dsh.loader.host.server  # noqa: F401
    mark("the host server and the command")
    from dsh.cli import fastpath

    fastpath.exit_promptly = lambda exc: None  # type: ignore[assignment]
    call = fastpath.plan(["run", "--transcript", transcript, "--home", tempfile.mkdtemp(prefix="dsh-split-")], {})
    assert call is not None
    out, sys.stdout = sys.stdout, open(os.devnull, "w")
    try:
        call()
    except SystemExit as exc:
        assert exc.code == 0, exc.code
    finally:
        sys.stdout = out
    mark("the run itself (load, compose, run the tree, flush)")
    marks.append(("total in-process", time.perf_counter() - start))
    assert "pydantic" not in sys.modules, "a plain transcript run imported pydantic"
    return marks


def main(argv: list[str]) -> int:
    if argv[1:2] == ["--child"]:
        for name, seconds in one(argv[2]):
            print(f"{seconds}\t{name}")
        return 0
    transcript = next((a for a in argv[1:] if not a.startswith("-") and not a.isdigit()), "background-settlement")
    repeat = int(argv[argv.index("--repeat") + 1]) if "--repeat" in argv else 3
    runs: list[list[tuple[str, float]]] = []
    for _ in range(repeat):  # each in a fresh interpreter: imports are the point
        done = subprocess.run([sys.executable, __file__, "--child", transcript], capture_output=True, text=True, check=True)
        runs.append([(name, float(s)) for s, name in (line.split("\t") for line in done.stdout.splitlines())])
    total = statistics.median(r[-1][1] for r in runs)
    print(f"{repeat} runs, load {open('/proc/loadavg').read().split()[0]}; medians:")
    for i, (name, _) in enumerate(runs[0]):
        median = statistics.median(r[i][1] for r in runs)
        print(f"{median * 1000:8.1f} ms  {100 * median / total:5.1f}%  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
