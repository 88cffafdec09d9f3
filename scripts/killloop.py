#!/usr/bin/env python3
"""The kill loop (issue 9 item 6): SIGKILL `dsh run` of a fan-out-with-follow-ups transcript at seeded
random moments, resume each tree once to completion, and check what a crash must never break.

    python scripts/killloop.py 300            # N trials, seeds 0..N-1; prints the counts
    python scripts/killloop.py 30 --jobs 2    # what tests/headless/test_kill.py runs

Every `dsh` command line runs in a child forked by a pre-imported fork server (`forkrun.py`, one
per job): a real, separate `dsh` process killed by a real SIGKILL, without paying interpreter
start-up and imports per run (they were most of each run's wall time, and no kill moment falls
inside them: the first possible moment is after the first NDJSON record).

The kill moment is the random input, not a race we try to win: the run prints NDJSON (`--json`) and
is killed right after its k-th record, k seeded and uniform over the record count of an uncrashed
run; the process is usually further along by then, which is more randomness, not less. A run that
exits before its moment is counted as `finished`. Ends are detected by process exit, never by sleeping.

Invariants, read from the logs after the resume (every one is an anomaly count):
- `unloadable`: a session file that does not read (unmaterialized ones are counted apart, see below);
- `claimed_missing`: a message a claim removed from an inbox that is neither entered into a step
  (`user/message`) nor back in its queue;
- `entered_twice`: a message id entered into more than one step of one session;
- `notice_count`: a child epoch that accepted work without exactly one `subagent-settled` notice
  with its id (`notice_id(child, epoch)`) in its parent's log, or a notice for no such epoch;
- `final_answer`: the root's last answer is not the scripted `ROOT_DONE`;
- `resume_failed`: the resume did not exit 0/1, printed a traceback, or reported a violation other
  than the divergence a kill may cause in a scripted model (`REPLAY_UNCONSUMED`, `REPLAY_PLACEHOLDER`:
  a kill between a spawn's durable tool call and the child's creation leaves that child unborn).
`scripted_divergence` counts kills between the root's durable reply asking for `subagent` calls and some child
taking its prompt (the resume then reports REPLAY_PLACEHOLDER): the script cannot address an unborn
child, so the final answer is not checked there (every other invariant is). `unmaterialized` (an empty file or a directory without one, left by a kill inside session creation)
and `claimed_missing` belong to issue 9 items 1–2 (claim/entry durability, atomic creation).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import queue
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TRANSCRIPT = REPO / "tests" / "headless" / "data" / "kill-fanout-followups.yaml"
OVERLAY = REPO / "tests" / "headless" / "data" / "kill-overlay.yaml"
FINAL_ANSWER = "ROOT_DONE"
ALLOWED_VIOLATIONS = ("REPLAY_UNCONSUMED", "REPLAY_PLACEHOLDER")
INVARIANTS = ("unloadable", "claimed_missing", "entered_twice", "notice_count", "final_answer", "resume_failed")
EXIT_BACKSTOP = 120.0  # loud backstop only; a run returns by exiting

FORKRUN = Path(__file__).resolve().with_name("forkrun.py")


@dataclass
class Trial:
    seed: int
    moment: int  # the NDJSON record after which the run was killed
    outcome: str = "killed"  # killed | finished | no-root
    anomalies: Counter[str] = field(default_factory=Counter)
    unmaterialized: int = 0
    placeholder_failed: bool = False
    divergent: bool = False
    notes: list[str] = field(default_factory=list)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("DSH_")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_args(home: Path) -> list[str]:
    return ["run", "--transcript", str(TRANSCRIPT), "--overlay", str(OVERLAY), "--home", str(home)]


class ForkServer:
    """One `forkrun.py` process: runs `dsh` argument vectors in forked children, one at a time."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(FORKRUN)], env=_env(), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        if not self._answer().get("ready"):
            raise SystemExit("the fork server did not start")

    def _answer(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the fork server exited ({self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def run(self, argv: list[str], *, kill_after: int | None = None, capture: bool = False) -> dict[str, Any]:
        """Run `dsh ARGV` to its exit, or SIGKILL it right after its `kill_after`-th stdout line."""
        assert self.proc.stdin is not None
        request = {"argv": argv, "killAfter": kill_after, "capture": capture, "backstop": EXIT_BACKSTOP}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=EXIT_BACKSTOP)


@contextmanager
def fork_servers(n: int) -> Iterator[queue.Queue[ForkServer]]:
    """`n` fork servers in a queue: each trial takes one for its runs and puts it back."""
    pool: queue.Queue[ForkServer] = queue.Queue()
    servers = [ForkServer() for _ in range(n)]
    for server in servers:
        pool.put(server)
    try:
        yield pool
    finally:
        for server in servers:
            server.close()


def measure(workdir: Path, server: ForkServer) -> int:
    """How many NDJSON records one uncrashed `--json` run prints: the range kill moments are drawn
    from. Counting records instead of seconds spreads the kills over the run itself on a machine
    of any speed."""
    home = workdir / "measure"
    run = server.run([*_run_args(home), "--json"], capture=True)
    records = run["stdout"].splitlines()
    result = json.loads(records[-1]) if records else {}
    if run["code"] not in (0, 1) or result.get("output") != FINAL_ANSWER:
        raise SystemExit(f"the uncrashed run failed ({run['code']}): {run['stderr'][-2000:]}")
    shutil.rmtree(home, ignore_errors=True)
    return len(records)


def ended_first(run: dict[str, Any], moment: int, records: int) -> bool:
    """Whether the run ended by itself before its kill. A read can carry many records at once: the
    one holding record `moment` may hold the last, and the run may have exited (0, or 1 for the
    spare replies) before the kill reached it. That is an end, not a crash: it printed every record
    an uncrashed run prints. Any other exit instead of SIGKILL is a failure of the run."""
    if run["seen"] < moment:
        return True  # it closed its stdout before printing record `moment`
    if run["code"] == -signal.SIGKILL:
        return False
    if run["code"] in (0, 1) and run["seen"] >= records:
        return True
    raise SystemExit(f"the run was to die of SIGKILL after record {moment} of {records}, "
                     f"it exited {run['code']} after {run['seen']}")


def trial(seed: int, records: int, workdir: Path, server: ForkServer, *, moment: int | None = None,
          keep: bool = False) -> Trial:
    """Kill `dsh run --json` right after it printed its k-th record (k seeded, 1..records): the
    moment is the random input, read from the process's own output, never from a clock."""
    rng = random.Random(seed)
    t = Trial(seed=seed, moment=rng.randint(1, records) if moment is None else moment)
    home = workdir / f"t{seed}"
    run = server.run([*_run_args(home), "--json"], kill_after=t.moment)
    if run["timeout"]:
        raise SystemExit(f"seed {seed}: the run neither exited nor printed within {EXIT_BACKSTOP:g}s")
    if ended_first(run, t.moment, records):
        t.outcome = "finished"  # the run ended before its kill: nothing to resume
    try:
        root = find_root(home)
        if root is None:
            t.outcome = "no-root"
            return t
        resume = server.run([*_run_args(home), "--resume", root])
        if resume["timeout"]:  # the server has killed it; keep the home for a post-mortem
            t.anomalies["resume_failed"] += 1
            keep = True
            kept = Path(tempfile.gettempdir()) / f"killloop-hung-{seed}"
            shutil.copytree(home, kept, dirs_exist_ok=True)
            t.notes.append(f"resume did not exit within {EXIT_BACKSTOP:g}s; home kept at {kept}")
            return t
        check_resume(t, resume["code"], resume["stderr"])
        check_logs(t, home, root)
    finally:
        if not keep:
            shutil.rmtree(home, ignore_errors=True)
    return t


def find_root(home: Path) -> str | None:
    from dsh.loader.session import read

    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        try:
            header = read(path).header
        except Exception:
            continue
        if not header.get("parentSession"):
            return str(header["id"])
    return None


def check_resume(t: Trial, code: int, stderr: str) -> None:
    if code not in (0, 1) or "Traceback" in stderr:
        t.anomalies["resume_failed"] += 1
        t.notes.append(f"resume exit {code}: {stderr[-1500:]}")
        return
    for line in stderr.splitlines():
        t.placeholder_failed |= line.startswith("dsh: REPLAY_PLACEHOLDER")
        if line.startswith("dsh: REPLAY_") and not line.startswith(tuple(f"dsh: {c}" for c in ALLOWED_VIOLATIONS)):
            t.anomalies["resume_failed"] += 1
            t.notes.append(line)


def check_logs(t: Trial, home: Path, root_id: str) -> None:
    from dsh.loader.errors import SessionError
    from dsh.loader.session import read

    logs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    for directory in sorted((home / "sessions").iterdir()):
        path = directory / "session.jsonl"
        if not path.exists() or path.stat().st_size == 0:
            t.unmaterialized += 1
            continue
        try:
            result = read(path)
        except SessionError as exc:
            t.anomalies["unloadable"] += 1
            t.notes.append(f"{directory.name}: {exc.code}")
            continue
        if result.issue is not None:
            t.anomalies["unloadable"] += 1  # the resume repaired every tree session; a torn tail is left
            t.notes.append(f"{directory.name}: torn tail after the resume")
        logs[directory.name] = (result.header, result.events)
    for sid, (_header, events) in logs.items():
        missing, twice = claim_facts(events)
        t.anomalies["claimed_missing"] += missing
        t.anomalies["entered_twice"] += twice
        if missing or twice:
            t.notes.append(f"{sid}: {missing} claimed-missing, {twice} entered twice")
    t.anomalies["notice_count"] += notice_facts(t, logs)
    root_events = logs.get(root_id, ({}, []))[1]
    if spawns_unborn(root_events, logs) and t.placeholder_failed:
        # The kill fell between the root's durable `subagent` calls and its children's creation,
        # so some child never took its prompt: the scripted root cannot address it (its follow-up
        # reply fails REPLAY_PLACEHOLDER), and if no notice comes after that failure the script
        # never reaches ROOT_DONE. A real model would see TOOL_OUTCOME_UNKNOWN and start the child
        # again; a script cannot. Counted apart, never silently.
        t.divergent = True
    elif final_answer(root_events) != FINAL_ANSWER:
        t.anomalies["final_answer"] += 1
        t.notes.append(f"root answer {final_answer(root_events)!r}")


def spawns_unborn(root_events: list[dict[str, Any]], logs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> bool:
    """Some `subagent` call of the root was cut off by the kill before its child accepted work.

    A call counts from the model's reply that asked for it (`assistant/message`), not only from
    its `tool/call`: a kill between the reply and the calls' events leaves no `tool/call` at all,
    and the resume's repair closes each call with an unknown outcome, the same unborn child."""
    calls = {e["data"]["callId"] for e in root_events if e["type"] == "tool/call" and e["data"]["name"] == "subagent"}
    for e in root_events:
        if e["type"] == "assistant/message":
            calls.update(part["id"] for part in e["data"]["message"]["content"]
                         if part.get("type") == "tool-call" and part.get("name") == "subagent")
    born = set()
    for _header, events in logs.values():
        descriptor = next((e["data"] for e in events if e["type"] == "subagent/descriptor"), None)
        accepted = any(e["type"] == "agent/inbox/spliced" and e["data"].get("inserted") for e in events)
        if descriptor is not None and accepted:
            born.add(descriptor.get("spawnCallId"))
    return bool(calls - born)


def claim_facts(events: list[dict[str, Any]]) -> tuple[int, int]:
    """(claimed messages neither entered nor queued, message ids entered twice) for one log."""
    lists: dict[str, list[dict[str, Any]]] = {"next-turn": [], "next-step": []}
    claimed: list[str] = []
    for e in events:
        if e["type"] != "agent/inbox/spliced":
            continue
        d = e["data"]
        items = lists[d["target"]]
        removed = items[d["start"]: d["start"] + d.get("removedCount", 0)]
        if removed and d.get("outcome") != "canceled":
            claimed.extend(m["id"] for m in removed)
        items[d["start"]: d["start"] + d.get("removedCount", 0)] = d.get("inserted", [])
    entered = Counter(e["data"]["id"] for e in events if e["type"] == "user/message")
    queued = {m["id"] for items in lists.values() for m in items}
    missing = sum(1 for mid in set(claimed) if mid not in entered and mid not in queued)
    twice = sum(1 for n in entered.values() if n > 1)
    return missing, twice


def notice_facts(t: Trial, logs: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]]) -> int:
    from dsh.loader.subagents import notice_id
    from dsh.loader.subagents.epochs import epochs_of

    bad = 0
    for sid, (header, events) in logs.items():
        parent = header.get("parentSession")
        descriptor = next((e["data"] for e in events if e["type"] == "subagent/descriptor"), {})
        if not parent or descriptor.get("mode") != "continuable" or parent not in logs:
            continue
        parent_events = logs[parent][1]
        got = Counter(
            m["id"] for e in parent_events
            # A repair's `requeued` splice puts a claimed-but-unentered notice back: not a new delivery.
            if e["type"] == "agent/inbox/spliced" and e["data"].get("outcome") != "requeued"
            for m in e["data"].get("inserted", [])
            if m.get("source", {}).get("kind") == "subagent-settled" and m["source"].get("senderSessionId") == sid
        )
        owed = {notice_id(sid, ep.epoch) for ep in epochs_of(events) if ep.accepted}
        for mid in owed | set(got):
            if got.get(mid, 0) != (1 if mid in owed else 0):
                bad += 1
                t.notes.append(f"{sid}: notice {mid} x{got.get(mid, 0)} (owed: {mid in owed})")
    return bad


def final_answer(events: Iterable[dict[str, Any]]) -> str | None:
    answer = None
    for e in events:
        if e["type"] == "assistant/message" and not e["data"].get("interrupted"):
            text = "".join(b.get("text", "") for b in e["data"]["message"]["content"] if b.get("type") == "text")
            if text:
                answer = text
    return answer


class KillLoop:
    """Fork servers, the measured record count and a work directory, shared by batches of trials."""

    def __init__(self, *, jobs: int = 1, workdir: Path | None = None) -> None:
        self.jobs = jobs
        self.own = workdir is None
        self.base = Path(tempfile.mkdtemp(prefix="dsh-kill-")) if workdir is None else workdir
        self._servers = fork_servers(jobs)

    def __enter__(self) -> KillLoop:
        self.pool = self._servers.__enter__()
        server = self.pool.get()
        try:
            self.records = measure(self.base, server)
        finally:
            self.pool.put(server)
        return self

    def __exit__(self, *exc: object) -> None:
        self._servers.__exit__(None, None, None)
        if self.own:
            shutil.rmtree(self.base, ignore_errors=True)

    def _trial(self, seed: int) -> Trial:
        server = self.pool.get()
        try:
            return trial(seed, self.records, self.base, server)
        finally:
            self.pool.put(server)

    def trials(self, seeds: Iterable[int]) -> list[Trial]:
        with ThreadPoolExecutor(max_workers=self.jobs) as pool:
            return list(pool.map(self._trial, seeds))


def run_loop(n: int, *, jobs: int = 1, first_seed: int = 0, workdir: Path | None = None) -> list[Trial]:
    with KillLoop(jobs=jobs, workdir=workdir) as loop:
        return loop.trials(range(first_seed, first_seed + n))


def summary(trials: list[Trial]) -> dict[str, Any]:
    outcomes = Counter(t.outcome for t in trials)
    anomalies = Counter({name: 0 for name in INVARIANTS})
    for t in trials:
        anomalies.update(t.anomalies)
    return {
        "trials": len(trials),
        "kills": outcomes["killed"] + outcomes["no-root"],
        "killed_before_root": outcomes["no-root"],
        "finished_before_kill": outcomes["finished"],
        "resumes": outcomes["killed"] + outcomes["finished"],
        "unmaterialized_sessions": sum(t.unmaterialized for t in trials),
        "scripted_divergence": sum(t.divergent for t in trials),
        "anomalies": dict(anomalies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("n", type=int, help="number of trials (kills)")
    parser.add_argument("--jobs", type=int, default=1, help="trials run side by side")
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--verbose", action="store_true", help="print every anomalous trial's notes")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    start = time.monotonic()
    trials = run_loop(args.n, jobs=args.jobs, first_seed=args.first_seed)
    out = summary(trials)
    out["seconds"] = round(time.monotonic() - start, 1)
    print(json.dumps(out, indent=2))
    for t in trials:
        if args.verbose and any(t.anomalies.values()):
            print(f"seed {t.seed} (record {t.moment}, {t.outcome}): {dict(t.anomalies)}")
            for note in t.notes:
                print(f"    {note}")


if __name__ == "__main__":
    main()
