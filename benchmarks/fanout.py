"""What a fan-out of N continuable children costs, as a person runs it (issue 13 rows 1 and 6).

The root starts N background children in one reply; a fence holds the root's second step until all
N settlement notices are accepted, so the third step enters them in one batch (deterministic). Each
measurement is one whole `dsh run --transcript FILE --home TMP` process (imports, transcript load,
run, teardown), fsync on unless `--no-fsync`, with the transcript written as JSON (JSON is YAML).
Runs of different N are interleaved, so a load change on a shared machine hits them alike.

Printed per N: median and min wall of the whole process, per-child cost, peak RSS (`wait4`), and
the same-run floor `python -c pass` (the interpreter start-up no run can avoid). Then the scaling
ratios: wall(N) / wall(smallest N) next to N / smallest N (linear means the two agree), and the
marginal memory per child, (RSS(largest N) - RSS(smallest N)) / (largest - smallest).

Also printed: the **filesystem's creation floor**, `mkdir` + `open(O_CREAT|O_EXCL)` + `close` for N
fresh directories where the homes live, timed in this process per round (every session costs one of
each; on the VMs here an ext4 *without a journal* spends 0.4-1.4 ms per new inode, in the kernel's
`recently_deleted` scan over inodes freed in the last hours, and the figure grows with every run
that deletes homes; a journaled ext4 spends ~30 µs). `--against DSH` runs another `dsh`
executable (an older tree's venv) in the same rounds, alternating which goes first, and prints
this tree's median over that one's per N: the same-run ratio, for a machine unlike the issue's.
`--homes DIR` puts the homes (and the creation floor) under DIR instead of the temp directory.

    python benchmarks/fanout.py [--children 100,1000,3000] [--repeat 5] [--no-fsync]
                                [--against OTHER/.venv/bin/dsh] [--homes /mnt/journaled/tmp]
    python benchmarks/fanout.py --profile 1000   # cProfile summary of one N=1,000 run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def transcript(n: int) -> dict:
    calls = [
        {"id": f"c{i}", "name": "subagent", "arguments": {"label": f"w{i}", "prompt": f"Reply with W{i}_DONE."}}
        for i in range(1, n + 1)
    ]
    agents: dict = {"root": {"replies": [{"toolCalls": calls}, {"text": "STARTED"}, {"text": "ALL_RECEIVED"}]}}
    for i in range(1, n + 1):
        agents[f"w{i}"] = {"spawnedBy": f"c{i}", "replies": [{"text": f"W{i}_DONE"}]}
    return {
        "version": 1,
        "name": f"fanout-{n}",
        "task": "fan out",
        "fences": [{"hold": {"agent": "root", "turn": 1, "step": 2,
                             "until": {"inboxAccepted": {"agent": "root", "kind": "subagent-settled", "count": n}}}}],
        "agents": agents,
    }


def dsh_command() -> list[str]:
    found = shutil.which("dsh", path=str(Path(sys.executable).parent)) or shutil.which("dsh")
    if found is None:
        raise SystemExit("dsh is not installed in this environment")
    return [found]


def command_for(file: Path, n: int, home: Path, dsh: list[str] | None = None) -> list[str]:
    """The `dsh run --transcript` command of an N-child fan-out transcript `file`."""
    limits = ["--max-children", str(n + 10), "--max-requests", str(2 * n + 10)]
    return [*(dsh or dsh_command()), "run", "--transcript", str(file), "--home", str(home), *limits]


def creation_floor(parent: Path, n: int) -> float:
    """Seconds per session of the inode work no layout with a directory and a file per session
    avoids: `mkdir` + `open(O_CREAT|O_EXCL)` + `close`, N times, in a fresh directory under `parent`."""
    base = Path(tempfile.mkdtemp(prefix="creation-floor-", dir=parent))
    try:
        start = time.perf_counter()
        for i in range(n):
            directory = base / f"s{i}"
            os.mkdir(directory, 0o700)
            os.close(os.open(directory / "session.jsonl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        return (time.perf_counter() - start) / n
    finally:
        shutil.rmtree(base, ignore_errors=True)


CPU: dict[str, list[float]] = {}  # command label -> user+sys seconds of each run (from wait4)


def run_once(cmd: list[str], env: dict[str, str], label: str = "") -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MiB, from wait4) and stdout of one process; CPU time into `CPU`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        CPU.setdefault(label, []).append(usage.ru_utime + usage.ru_stime)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err.read().decode()[-2000:]}")
        return wall, usage.ru_maxrss / 1024, out.read().decode()


def area_of(filename: str, function: str) -> str:
    """The part of the process a profiled function belongs to: a dsh package (loader/session by
    module, its hot layer), asyncio, a C built-in by name, or the rest of the standard library."""
    if "/loader/session/" in filename:
        return "loader/session/" + Path(filename).stem
    for root in ("/loader/", "/cli/"):
        if root in filename:
            tail = filename.split(root, 1)[1]
            return root.strip("/") + ("/" + tail.split("/", 1)[0] if "/" in tail else "")
    if "/asyncio/" in filename:
        return "asyncio"
    if filename == "~":
        return "built-in " + function.split(" of ")[0].replace("<built-in method ", "").replace("<method ", "").strip("<>")
    return "other: " + Path(filename).stem


def print_shares(stats: Any) -> None:
    """Own time (tottime) grouped by `area_of`, the top 20: the README's profile summary."""
    own: dict[str, float] = {}
    calls: dict[str, int] = {}
    for (filename, _, function), (_, ncalls, tottime, _, _) in stats.stats.items():
        area = area_of(filename, function)
        own[area] = own.get(area, 0.0) + tottime
        calls[area] = calls.get(area, 0) + ncalls
    total = sum(own.values()) or 1.0
    print(f"own time by area (of {total:.2f}s under cProfile):")
    for area, spent in sorted(own.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {100 * spent / total:5.1f}%  {calls[area]:9,d} calls  {area}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", default="100,1000,3000", help="comma-separated N values")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-fsync", action="store_true")
    parser.add_argument("--profile", type=int, metavar="N", help="print a cProfile summary of one run")
    parser.add_argument("--against", metavar="DSH", help="another dsh executable, run in the same rounds")
    parser.add_argument("--homes", metavar="DIR", help="where the homes go (default: the temp directory)")
    args = parser.parse_args()
    sizes = [int(x) for x in args.children.split(",")]
    fsync = not args.no_fsync
    env = {**os.environ, "DSH_PERSISTENCE__FSYNC": "true" if fsync else "false"}
    env.pop("DSH_HOME", None)
    with tempfile.TemporaryDirectory(prefix="dsh-fanout-", dir=args.homes) as tmp:
        files = {}
        for n in sorted(set(sizes + ([args.profile] if args.profile else []))):
            files[n] = Path(tmp) / f"fanout-{n}.yaml"
            files[n].write_text(json.dumps(transcript(n)))

        def command(n: int, home: Path) -> list[str]:
            return command_for(files[n], n, home)

        if args.profile:
            home = Path(tmp) / "home-profile"
            prof = Path(tmp) / "run.prof"
            # The console script ends with `os._exit` (cli.fastpath.exit_promptly), which would lose
            # cProfile's output: profile `entry` in-process with the prompt exit turned off.
            runner = (
                "import cProfile, sys; from dsh.cli import fastpath, main; "
                "fastpath.exit_promptly = lambda exc: None; sys.argv = sys.argv[2:]; "
                "cProfile.run('main.entry()', sys.argv.pop(0))"
            )
            cmd = [sys.executable, "-c", runner, "--", str(prof), *command(args.profile, home)]
            wall, _, _ = run_once(cmd, env)
            import pstats

            print(f"profile of N={args.profile} fsync={str(fsync).lower()} (wall under cProfile {wall:.2f}s)")
            stats = pstats.Stats(str(prof))
            print_shares(stats)
            stats.sort_stats("tottime").print_stats(20)
            return

        walls: dict[int, list[float]] = {n: [] for n in sizes}
        rss: dict[int, list[float]] = {n: [] for n in sizes}
        other: dict[int, list[float]] = {n: [] for n in sizes}
        floor: list[float] = []
        creation: list[float] = []
        for r in range(args.repeat):
            floor.append(run_once([sys.executable, "-c", "pass"], env, "floor")[0])
            creation.append(creation_floor(Path(tmp), max(sizes)))
            for n in sizes:  # interleaved: every repeat runs every N once
                runs = [None, args.against] if args.against else [None]
                for dsh in runs if r % 2 == 0 else runs[::-1]:  # alternating which goes first
                    home = Path(tmp) / f"home-{n}-{r}-{'other' if dsh else 'this'}"
                    cmd = command_for(files[n], n, home, [dsh] if dsh else None)
                    wall, peak, out = run_once(cmd, env, f"{n}{'-other' if dsh else ''}")
                    if "ALL_RECEIVED" not in out:
                        raise SystemExit(f"N={n}: unexpected answer {out!r}")
                    if dsh:
                        other[n].append(wall)
                    else:
                        walls[n].append(wall)
                        rss[n].append(peak)
                    shutil.rmtree(home, ignore_errors=True)
    load = os.getloadavg()
    floor_s = statistics.median(floor)
    print(f"fan-out, whole `dsh run --transcript` process, fsync={str(fsync).lower()}, runs={args.repeat}, "
          f"loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, nproc {os.cpu_count()}")
    print(f"floor `python -c pass`: median {floor_s * 1000:.0f} ms; creation floor (mkdir + create, "
          f"{Path(tmp).parent}): median {statistics.median(creation) * 1e6:.0f} µs per session, "
          f"{statistics.median(creation) * 1000:.2f} s per 1,000")
    base = sizes[0]
    for n in sizes:
        med = statistics.median(walls[n])
        print(
            f"N={n:5}  wall median {med:6.2f}s  min {min(walls[n]):6.2f}s  "
            f"cpu {statistics.median(CPU[str(n)]):6.2f}s  "
            f"per child {(med - floor_s) / n * 1000:6.3f} ms  peak RSS {statistics.median(rss[n]):6.1f} MiB  "
            f"x floor {med / floor_s:6.1f}  scale {med / statistics.median(walls[base]):5.2f} for N x{n / base:.0f}"
        )
    if args.against:
        for n in sizes:
            theirs = statistics.median(other[n])
            print(f"N={n:5}  against {args.against}: wall median {theirs:6.2f}s  min {min(other[n]):6.2f}s  "
                  f"cpu {statistics.median(CPU[f'{n}-other']):6.2f}s  this / that {statistics.median(walls[n]) / theirs:5.3f}")
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        per_child = (statistics.median(rss[hi]) - statistics.median(rss[lo])) * 1024 / (hi - lo)
        print(f"marginal memory per child ({lo}->{hi}): {per_child:.1f} KiB")
        mid = [n for n in sizes if n != lo]
        for n in mid:
            ratio = (statistics.median(walls[n]) - statistics.median(walls[lo])) / (n - lo)
            print(f"marginal cost per child ({lo}->{n}): {ratio * 1000:.3f} ms")


if __name__ == "__main__":
    main()
