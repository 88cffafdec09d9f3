"""Helpers for the `dsh` command tests: environments scrubbed of the developer's `DSH_*` variables,
small transcript writers, log readers, and `LiveRun`, a `dsh run --json` subprocess whose NDJSON stdout
is read record by record, so a test waits on the record it needs rather than on time.

(`tests/cli` has no `__init__.py`: as a package its name would be `cli` and shadow the real one.)
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.session import read

_SCRIPT = Path(sys.executable).with_name("dsh")
DSH = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-c", "from dsh.cli.main import app; app()"]

# Loud backstops only: every wait below returns on a fact (a line, an exit) long before these.
LINE_BACKSTOP = 15.0
EXIT_BACKSTOP = 20.0

# Variables that would let the developer's own setup, or the CI runner's, leak into a test
# (`CI=true` makes `flow --update` refuse to write snapshots).
_SCRUBBED = ("DSH_HOME", "DSH_PROFILE", "CI")


def clean_env(extra: Mapping[str, str | None] | None = None) -> dict[str, str | None]:
    """`env=` for `CliRunner.invoke`: unset the dsh variables of the surrounding shell, then `extra`."""
    env: dict[str, str | None] = {name: None for name in os.environ if name.upper().startswith("DSH_")}
    env.update({name: None for name in _SCRUBBED})
    env.update(extra or {})
    return env


def subprocess_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without `DSH_*`, and without PYTHONUNBUFFERED: `dsh run --json` must
    stream its records to a pipe by itself, as it does for a user's `| jq`."""
    env = {k: v for k, v in os.environ.items()
           if not k.upper().startswith("DSH_") and k not in ("PYTHONUNBUFFERED", *_SCRUBBED)}
    env.update(extra or {})
    return env


def write_yaml(path: Path, doc: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
    return path


def transcript(directory: Path, name: str, agents: Mapping[str, Any], task: str = "go", **extra: Any) -> Path:
    return write_yaml(directory / f"{name}.yaml", {"version": 1, "name": name, "task": task, **extra, "agents": agents})


def spawn(call_id: str, label: str = "worker", prompt: str = "Work on it.") -> dict[str, Any]:
    return {"toolCalls": [{"id": call_id, "name": "subagent", "arguments": {"label": label, "prompt": prompt}}]}


def hold_until_hang(agent: str, step: int = 2) -> list[dict[str, Any]]:
    """A fence holding root step `step` until `agent`'s replay stream reached its `hang`: once the
    root's turn 1 has ended, the hang is a fact (the NDJSON stream has no event for it)."""
    return [{"hold": {"agent": "root", "turn": 1, "step": step, "until": {"hangReached": {"agent": agent}}}}]


def log_events(home: Path, session_id: str) -> list[dict[str, Any]]:
    return read(home / "sessions" / session_id / "session.jsonl").events


def texts_of(item: dict[str, Any]) -> list[str]:
    """Text blocks of a message, or of the message a `user/message` / `assistant/message` event holds."""
    data = item.get("data", item)
    blocks = data.get("content") or data.get("message", {}).get("content", [])
    return [b["text"] for b in blocks if b.get("type") == "text"]


class LiveRun:
    """`dsh run --json …` in a subprocess. A reader thread turns stdout into parsed records, so the
    test can block on "the next record" and stop at the one it waits for."""

    def __init__(self, args: list[str], env: Mapping[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*DSH, "run", "--json", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=subprocess_env(env),
        )
        self.records: list[dict[str, Any]] = []
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()
        self.stderr = b""

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, predicate: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        """Read records until one satisfies `predicate`; returns it. Fails loudly at EOF or backstop."""
        for record in self.records:
            if predicate(record):
                return record
        while True:
            try:
                line = self._lines.get(timeout=LINE_BACKSTOP)
            except queue.Empty:
                pytest.fail(f"backstop: no {what} within {LINE_BACKSTOP}s; records so far: {len(self.records)}")
            if line is None:
                self.proc.wait(timeout=EXIT_BACKSTOP)
                pytest.fail(f"dsh run ended before {what}: exit {self.proc.returncode}, stderr "
                            f"{self.proc.stderr.read().decode() if self.proc.stderr else ''}")
            record = json.loads(line)
            self.records.append(record)
            if predicate(record):
                return record

    def wait_event(self, session_id: str, kind: str, **data: Any) -> dict[str, Any]:
        def match(r: dict[str, Any]) -> bool:
            return (r["type"] == "event" and r["sessionId"] == session_id and r["event"]["type"] == kind
                    and all(r["event"]["data"].get(k) == v for k, v in data.items()))

        return self.wait_for(match, f"{kind} {data} of {session_id}")

    def signal(self, signum: int = signal.SIGINT) -> None:
        self.proc.send_signal(signum)

    def finish(self) -> int:
        """Wait for exit; collect the remaining stdout records and stderr. Returns the exit code."""
        code = self.proc.wait(timeout=EXIT_BACKSTOP)
        self._reader.join(timeout=EXIT_BACKSTOP)
        while (line := self._lines.get_nowait()) is not None:  # the reader ended: None is queued
            self.records.append(json.loads(line))
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=EXIT_BACKSTOP)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def run_dsh(*args: str | Path, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A short `dsh` command in its own process (the second process of a two-process test)."""
    return subprocess.run(
        [*DSH, *(str(a) for a in args)], capture_output=True, text=True, timeout=EXIT_BACKSTOP,
        env=subprocess_env(env), stdin=subprocess.DEVNULL,
    )


_SYS_TGKILL = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)


def send_two_signals(pid: int, signum: int) -> None:
    """Deliver `signum` to `pid` twice, both before the process runs any Python code again.

    Two `kill`s of one standard signal coalesce whenever the first is still pending. Stopping the
    process first and then queueing one process-directed instance (`kill`) and one directed at the
    main thread (`tgkill`; its tid is the pid) puts them in two different pending sets, so `SIGCONT`
    delivers both."""
    import ctypes

    if _SYS_TGKILL is None:
        pytest.skip(f"tgkill syscall number unknown on {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    os.kill(pid, signal.SIGSTOP)
    try:
        os.kill(pid, signum)
        if libc.syscall(_SYS_TGKILL, pid, pid, signum) != 0:
            raise OSError(ctypes.get_errno(), "tgkill failed")
    finally:
        os.kill(pid, signal.SIGCONT)


HANGING_CHILD = {
    "root": {"replies": [spawn("start-worker"), {"text": "ROOT_WAITING"}]},
    "worker": {"spawnedBy": "start-worker", "replies": [{"hang": {"text": "partial"}}]},
}


def first_child(run: Any) -> tuple[str, str]:
    """`(root, child)` of the first child a live run starts, from its `subagent/start` lifecycle record."""
    start = run.wait_for(lambda r: r["type"] == "lifecycle" and r["name"] == "subagent/start", "subagent/start")
    return start["parentSessionId"], start["sessionId"]


def start_hanging_child(live_run: Any, home: Path, tmp_path: Path) -> tuple[Any, str, str]:
    """A live run whose root finished turn 1 while its background child hangs in its first request
    (the fence makes the root's `turn/end` imply the hang)."""
    script = transcript(tmp_path, "hanging-child", HANGING_CHILD, fences=hold_until_hang("worker"))
    run = live_run("--transcript", script, "--home", home)
    root, child = first_child(run)
    run.wait_event(child, "step/start", turn=1, step=1)
    run.wait_event(root, "turn/end", turn=1)
    return run, root, child
