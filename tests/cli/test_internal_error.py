"""Issue 15 item 6: the last line of defence. `cli.main.guard` (what the `dsh` console script runs)
turns an unexpected exception into `dsh: internal error: <type>: <message>` plus the path of a
private file holding the traceback (or the traceback itself with `DSH_DEBUG=1`), and exit 1.

The failing command is a plain raising callable handed to the real wrapper: no test-only switch
exists in the product to make a command fail.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import tempfile
from importlib.metadata import entry_points

import pytest
from cli_kit import subprocess_env

from dsh.cli.main import guard


def explode() -> None:
    raise ValueError("no\nsuch value")


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Point the stdlib's temp directory at this test's own directory, to find the log it writes."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_an_unexpected_exception_is_one_line_a_private_log_and_exit_1(private_tmp):
    err = io.StringIO()

    with pytest.raises(SystemExit) as exited:
        guard(explode, environ={}, stderr=err)

    assert exited.value.code == 1
    headline, saved, tail = err.getvalue().split("\n")
    assert headline == "dsh: internal error: ValueError: no such value"
    assert tail == "" and "Traceback" not in err.getvalue()
    (log,) = private_tmp.glob("dsh-internal-error-*.log")
    assert saved == f"dsh: traceback saved to {log} (rerun with DSH_DEBUG=1 to print it)"
    assert stat.S_IMODE(os.stat(log).st_mode) == 0o600
    text = log.read_text()
    assert text.startswith("Traceback (most recent call last):") and "in explode" in text


def test_dsh_debug_prints_the_traceback_and_saves_nothing(private_tmp):
    err = io.StringIO()

    with pytest.raises(SystemExit) as exited:
        guard(explode, environ={"DSH_DEBUG": "1"}, stderr=err)

    assert exited.value.code == 1
    assert err.getvalue().startswith("Traceback (most recent call last):")
    assert err.getvalue().endswith("dsh: internal error: ValueError: no such value\n")
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize("code", [0, 2, 130])
def test_exits_and_interrupts_pass_through_untouched(code):
    err = io.StringIO()

    with pytest.raises(SystemExit) as exited:
        guard(lambda: sys.exit(code), environ={}, stderr=err)
    with pytest.raises(KeyboardInterrupt):
        guard(lambda: (_ for _ in ()).throw(KeyboardInterrupt()), environ={}, stderr=err)

    assert exited.value.code == code
    assert err.getvalue() == ""


def test_the_console_script_runs_the_app_inside_the_guard():
    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "dsh"]
    assert script.value == "dsh.cli.main:entry"

    done = subprocess.run(
        [sys.executable, "-c", "import sys; from dsh.cli.main import entry; sys.argv = ['dsh', 'sessions', 'show', 'a..b']; entry()"],
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "dsh: 'a..b' is not a session id: it contains '..'\n"
