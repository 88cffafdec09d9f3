"""The live tree on a TTY (issue 11 item 2), driven through a pseudo-terminal (stdlib `pty`, so no
new test dependency): a real `dsh run --transcript interrupt-demo --parked wait` whose child hangs,
with stderr on the pty and stdout on a pipe. The test waits on what the screen shows (rows, the
address, then `parked` and the waiting line after a `dsh interrupt` from a second process), then
stops the run with SIGINT.
"""

from __future__ import annotations

import os
import pty
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest
from cli_kit import DSH, EXIT_BACKSTOP, LINE_BACKSTOP, subprocess_env

from dsh.loader.texts import render

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
COLOR = re.compile(r"\x1b\[[0-9;]*(?:3[0-7]|9[0-7]|38;)[0-9;]*m")
ADDRESS = re.compile(r"(session-[0-9a-f-]{36}/(?:session-)?[0-9a-f-]{36})")


class Screen:
    """Everything the run wrote to the pty, read by a thread; `wait` returns once `pattern` shows."""

    def __init__(self, fd: int) -> None:
        self.fd, self.raw, self._changed = fd, b"", threading.Condition()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: every writer closed the slave
                chunk = b""
            with self._changed:
                self.raw += chunk
                self._changed.notify_all()
            if not chunk:
                return

    @property
    def text(self) -> str:
        return ANSI.sub("", self.raw.decode("utf-8", "replace"))

    def wait(self, pattern: str) -> re.Match[str]:
        with self._changed:
            found = self._changed.wait_for(lambda: re.search(pattern, self.text), timeout=LINE_BACKSTOP)
        assert found, f"{pattern!r} never showed; screen:\n{self.text}"
        return found

    def close(self) -> None:
        self._thread.join(timeout=EXIT_BACKSTOP)


def start(home: Path, *args: str, no_color: bool = False) -> tuple[subprocess.Popen[bytes], Screen]:
    master, slave = pty.openpty()
    extra = {"TERM": "xterm-256color", "COLUMNS": "320", "LINES": "40"}
    env = subprocess_env(extra)
    env.pop("NO_COLOR", None)
    if no_color:
        env["NO_COLOR"] = "1"
    proc = subprocess.Popen([*DSH, "run", *args, "--home", str(home)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    return proc, Screen(master)


def finish(proc: subprocess.Popen[bytes], screen: Screen) -> tuple[int, bytes]:
    out, _ = proc.communicate(timeout=EXIT_BACKSTOP)
    screen.close()
    os.close(screen.fd)
    return proc.returncode, out


@pytest.mark.parametrize("no_color", [False, True], ids=["color", "NO_COLOR"])
def test_live_tree_shows_rows_parked_state_and_the_waiting_line(tmp_path, no_color):
    home = tmp_path / "home"
    proc, screen = start(home, "--transcript", "interrupt-demo", "--parked", "wait", no_color=no_color)
    try:
        screen.wait(r"agent\s+address\s+state\s+turn\s+elapsed\s+tokens")
        child_row = screen.wait(r"long task\s+" + ADDRESS.pattern + r"\s+running\s+1\s")
        address = child_row.group(1)
        root_id = address.split("/")[0]
        screen.wait(r"root\s+" + re.escape(root_id) + r"\s+idle\s+1\s")
        interrupt = subprocess.run([*DSH, "interrupt", address, "--home", str(home)], capture_output=True,
                                   text=True, env=subprocess_env(), timeout=EXIT_BACKSTOP)
        assert interrupt.returncode == 0, interrupt.stderr
        screen.wait(r"long task\s+" + re.escape(address) + r"\s+parked\s+1\s")
        send = f"dsh send {address} MESSAGE --home {home}"
        screen.wait(re.escape(render("T-CLI-LIVE-WAITING", label="long task", send=send)))
    finally:
        proc.send_signal(signal.SIGINT)
        code, out = finish(proc, screen)

    assert code == 130
    assert out == b"WAITING_FOR_CHILD\n"  # stdout holds the answer only: no row, no escape code
    colored = bool(COLOR.search(screen.raw.decode("utf-8", "replace")))
    assert colored is not no_color


def test_quiet_turns_the_live_tree_off(tmp_path):
    proc, screen = start(tmp_path / "home", "--transcript", "hello", "--quiet")
    code, out = finish(proc, screen)

    assert code == 0 and out.endswith(b"\n")
    assert "address" not in screen.text and "turn" not in screen.text


def test_the_live_tree_ends_with_every_settled_row(tmp_path):
    """A run that ends by itself leaves its final tree on the screen: the child settled, the root idle."""
    proc, screen = start(tmp_path / "home", "--transcript", "background-settlement")
    code, out = finish(proc, screen)

    assert code == 0, screen.text
    assert re.search(r"settled: completed", screen.text), screen.text
    assert re.search(r"root\s+session-[0-9a-f-]{36}\s+idle\s+\d+\s", screen.text), screen.text
    assert b"\x1b" not in out


def test_json_stdout_stays_ndjson_only_while_the_tree_is_drawn(tmp_path):
    import json

    proc, screen = start(tmp_path / "home", "--transcript", "background-settlement", "--json")
    code, out = finish(proc, screen)

    records = [json.loads(line) for line in out.decode().splitlines()]
    assert code == 0 and records[0]["type"] == "init" and records[-1]["type"] == "result"
    assert "settled: completed" in screen.text


def test_abandon_gives_the_cursor_back_before_a_hard_exit():
    """A second Ctrl-C ends the process with `os._exit`, skipping `Live.stop()`: the cursor the
    tree hid must be shown again first."""
    import io

    from rich.console import Console

    from dsh.cli.live import LiveTree

    out = io.StringIO()
    tree = LiveTree(Console(file=out, force_terminal=True, width=120))
    tree.__enter__()
    tree.agent("session-x", {})
    hidden = out.getvalue()
    tree.abandon()

    assert "\x1b[?25l" in hidden and out.getvalue()[len(hidden):].endswith("\x1b[?25h")
    tree.__exit__(None, None, None)
