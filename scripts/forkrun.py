#!/usr/bin/env python3
"""A fork server for `dsh` command lines: the kill loop's cheap per-run process (`killloop.py`).

Most of a short `dsh run --transcript`'s wall time is interpreter start-up and imports, the same
for every run. This process pays them once: it imports what a `dsh run` imports, then, per request,
forks a child that runs the console script's own `entry()` on the request's argument vector. The
child is a real, separate `dsh` process (its own pid, loop, files and exit), started from a clean
pre-imported state; this server never runs a command itself, so no run sees another's state. The
`random` module is reseeded in each child by the stdlib's at-fork hook; ids come from `os.urandom`.

Requests are JSON lines on stdin: `{"argv": [...], "killAfter": K | null, "capture": bool,
"backstop": seconds}`. With `killAfter` the child is sent SIGKILL right after its stdout carried its
K-th line (the kill loop's seeded moment, read from the run's own output, never from a clock); a
run that exits first is reported with `seen < K`. One JSON line answers each request on the
server's original stdout: `{"code": exit status or -signal, "seen": lines read, "stdout": text when
capture, "stderr": text, "timeout": bool}`. The backstop kills a child that neither exits nor
prints within it (a loud failure, never a sequencing device). One request at a time per server;
the kill loop starts one server per job.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import sys
import tempfile
import time
from typing import Any

# Every package a `dsh run --transcript --json` imports (its own modules import the rest); a
# module missed here is imported by each child instead, which costs time, not correctness.
PREIMPORT = (
    "asyncio", "json", "dsh.cli.main", "dsh.cli.fastpath", "dsh.cli.run_command", "dsh.cli.logsetup",
    "dsh.loader.headless", "dsh.loader.tree", "dsh.loader.host.server", "dsh.loader.host.client",
    "dsh.loader.tools", "dsh.loader.transcripts", "dsh.loader.config", "dsh.loader.subagents",
    "dsh.loader.models", "dsh.loader.session", "dsh.loader.fences", "dsh.loader.sinks",
)


def _child(argv: list[str], out_fd: int, err_fd: int) -> None:
    """In the forked child: stdio onto the request's pipe and file, then the console script."""
    code = 1
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:  # the server's pipes stay its own
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass  # the listing's own descriptor, already closed
        sys.argv = ["dsh", *argv]
        from dsh.cli.main import entry

        try:
            entry()
            code = 0
        except SystemExit as exc:  # entry() exits promptly itself unless a thread is still alive
            if isinstance(exc.code, int) or exc.code is None:
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
        import threading
        import atexit

        for thread in threading.enumerate():  # what the normal exit does before its atexit handlers
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _serve_one(request: dict[str, Any]) -> dict[str, Any]:
    kill_after: int | None = request.get("killAfter")
    capture = bool(request.get("capture"))
    deadline = time.monotonic() + float(request.get("backstop", 120.0))
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            _child(list(request["argv"]), write_fd, err.fileno())
        os.close(write_fd)
        seen, chunks, timed_out = 0, [], False
        try:
            while kill_after is None or seen < kill_after:
                ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
                if not ready:
                    timed_out = True
                    break
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    break  # the run closed its stdout: it is exiting
                seen += chunk.count(b"\n")
                if capture:
                    chunks.append(chunk)
            if timed_out or (kill_after is not None and seen >= kill_after):
                os.kill(pid, signal.SIGKILL)
        finally:
            os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    code = os.waitstatus_to_exitcode(status)
    return {"code": code, "seen": seen, "stdout": b"".join(chunks).decode(errors="replace"), "stderr": stderr,
            "timeout": timed_out}


def main() -> None:
    for name in PREIMPORT:
        importlib.import_module(name)
    answers = os.fdopen(os.dup(1), "w")  # the server's own stdout carries answers only
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # a child's stdio is set after fork; nothing of the server's reaches it
    answers.write(json.dumps({"ready": os.getpid()}) + "\n")
    answers.flush()
    for line in sys.stdin:
        answers.write(json.dumps(_serve_one(json.loads(line))) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
