"""What a fan-out of N continuable children costs (issue: continuation manager).

The root starts N background children in one reply; a fence holds the root's second step until all
N settlement notices are accepted, so the third step enters them in one batch (deterministic). Runs
through `run_tree` with the replay provider and persistence on (JSONL store, write-behind, fsync as
configured). Each measurement runs in a fresh process so peak RSS is its own.

    python benchmarks/fanout.py [--children 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


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


def child(n: int, fsync: bool) -> None:
    import asyncio

    from dsh.loader.config import compose
    from dsh.loader.headless import RunRequest, run_tree
    from dsh.loader.transcripts import load_transcript

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fanout.yaml"
        path.write_text(json.dumps(transcript(n)))
        script = load_transcript(path)
        environ = {"DSH_PERSISTENCE__FSYNC": "true" if fsync else "false", "DSH_PERSISTENCE__BATCH_DELAY_MS": "200"}
        composed = compose(profile="test", transcript=script, environ=environ)
        request = RunRequest(home=Path(tmp) / "home", config=composed.config, transcript=script,
                             fences_allowed=True, timeout=600)
        start = time.perf_counter()
        result = asyncio.run(run_tree(request))
        wall = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"wall": wall, "rss_mib": rss_mib, "output": result.output,
                      "violations": len(result.violations), "subagents": len(result.subagents)}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--fsync", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.children, args.fsync)
        return
    for fsync in (False, True):
        runs = []
        for _ in range(args.repeat):
            cmd = [sys.executable, __file__, "--child", "--children", str(args.children)] + (["--fsync"] if fsync else [])
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        walls = sorted(r["wall"] for r in runs)
        print(
            f"children={args.children} fsync={str(fsync).lower():5} runs={len(runs)} "
            f"wall median={walls[len(walls) // 2]:.2f}s (min {walls[0]:.2f}s) "
            f"peak RSS max={max(r['rss_mib'] for r in runs):.1f} MiB "
            f"answer={runs[0]['output']} violations={runs[0]['violations']} subagents={runs[0]['subagents']}"
        )


if __name__ == "__main__":
    main()
