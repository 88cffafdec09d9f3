"""Issue 15 item 5: inputs that used to end in a traceback and exit 1 now get one line and exit 2.

The YAML cases (150 levels of nesting, a 5,000-digit integer) are pinned per surface in
`test_hostile_yaml.py`; here are the same limits for `DSH_*` JSON values, the home checks and
over-long session ids.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def one_line(result) -> str:
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    return result.stderr


@pytest.mark.parametrize(("value", "problem"), [
    pytest.param("[" * 100_000, "nested deeper than 64 levels", id="recursion"),
    pytest.param('{"maxTokens": ' + "9" * 5000 + "}", "integer longer than 64 digits", id="int-5000-digits"),
    pytest.param('{"model": "\\ud800"}', "lone surrogate", id="lone-surrogate"),
    pytest.param('{"maxTokens": NaN}', "NaN is not JSON", id="nan"),
])
def test_a_hostile_dsh_json_section_value_is_one_line_exit_2(dsh, value, problem):
    result = dsh("config", "show", env={"DSH_MODEL": value})

    assert result.exit_code == 2
    assert one_line(result).startswith("dsh: environment DSH_MODEL: model: not valid JSON: ")
    assert problem in result.stderr


def test_a_regular_file_as_home_is_refused_before_the_run_starts(dsh, tmp_path):
    home = tmp_path / "afile"
    home.write_text("mine\n")

    result = dsh("run", "--transcript", "background-settlement", "--home", home)

    assert result.exit_code == 2
    assert one_line(result) == f"dsh: {home} is not a directory; give --home (or DSH_HOME) a directory\n"
    assert home.read_text() == "mine\n"


def test_a_home_below_a_regular_file_is_refused(dsh, tmp_path):
    (tmp_path / "afile").write_text("")

    result = dsh("run", "--transcript", "background-settlement", env={"DSH_HOME": str(tmp_path / "afile" / "h")})

    assert result.exit_code == 2
    assert one_line(result) == f"dsh: {tmp_path / 'afile'} is not a directory; give --home (or DSH_HOME) a directory\n"


def test_a_regular_file_as_sessions_dir_is_refused_for_a_run(dsh, tmp_path):
    home = tmp_path / "h"
    home.mkdir()
    (home / "sessions").write_text("")

    result = dsh("run", "--transcript", "background-settlement", "--home", home)

    assert result.exit_code == 2
    assert one_line(result).startswith(f"dsh: {home / 'sessions'} is not a directory")


@pytest.mark.parametrize("command", ["list", "show", "tree"])
def test_read_only_commands_refuse_a_regular_file_as_home(dsh, tmp_path, command):
    home = tmp_path / "afile"
    home.write_text("")

    result = dsh("sessions", command, *([] if command == "list" else ["session-x"]), "--home", home)

    assert result.exit_code == 2
    assert one_line(result).startswith(f"dsh: {home} is not a directory")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a 0500 directory, so it cannot be made read-only here")
def test_a_read_only_home_is_refused_for_a_run_and_still_listed(dsh, tmp_path):
    home = tmp_path / "h"
    (home / "sessions").mkdir(parents=True)
    home.chmod(0o500)
    try:
        ran = dsh("run", "--transcript", "background-settlement", "--home", home)
        listed = dsh("sessions", "list", "--home", home)
    finally:
        home.chmod(0o700)

    assert ran.exit_code == 2
    assert one_line(ran) == f"dsh: cannot write under {home}; give --home (or DSH_HOME) a writable directory\n"
    assert (listed.exit_code, listed.stderr) == (0, "")


def _read_only_mount_runs(home: Path, *commands: list[str]) -> list[subprocess.CompletedProcess[str]] | None:
    """Run each `dsh` command with `home` bind-mounted read-only in a private mount namespace (how
    root gets a home it cannot write); None when this machine does not allow that."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    mount = f"mount --bind {shlex.quote(str(home))} {shlex.quote(str(home))} && mount -o remount,bind,ro {shlex.quote(str(home))}"
    probe = subprocess.run([unshare, "-m", "sh", "-c", mount], capture_output=True, text=True)
    if probe.returncode != 0:
        return None
    dsh = str(Path(sys.executable).with_name("dsh"))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "DSH_HOME", "DSH_PROFILE")}
    return [
        subprocess.run([unshare, "-m", "sh", "-c", f"{mount} && exec {shlex.join([dsh, *command])}"],
                       capture_output=True, text=True, env=env, timeout=120)
        for command in commands
    ]


def test_a_read_only_mounted_home_is_refused_for_a_run_and_still_listed(tmp_path):
    """The same rule for any user, root included: a home on a read-only mount (EROFS, which no
    permission bit can grant) refuses the run in one line, exit 2, and still lists its sessions."""
    home = tmp_path / "h"
    (home / "sessions").mkdir(parents=True)
    home.chmod(0o700)
    runs = _read_only_mount_runs(home, ["run", "--transcript", "background-settlement", "--home", str(home)],
                                 ["sessions", "list", "--home", str(home)])
    if runs is None:
        pytest.skip("no private mount namespace here (`unshare -m` and a read-only bind mount are not allowed)")
    ran, listed = runs

    assert (ran.returncode, ran.stdout) == (2, ""), ran.stderr
    assert ran.stderr == f"dsh: cannot write under {home}; give --home (or DSH_HOME) a writable directory\n"
    assert (listed.returncode, listed.stderr) == (0, "")
    assert listed.stdout.split() == ["ID", "CREATED", "STATE", "LAST", "STOP", "TURNS", "LABEL", "TASK"]
    assert sorted(p.name for p in home.rglob("*")) == ["sessions"]  # nothing was written


@pytest.mark.parametrize("command", ["show", "tree"])
@pytest.mark.parametrize(("session_id", "problem"), [
    pytest.param("a" * 300, "it is longer than 128 characters", id="300-bytes"),
    pytest.param("../sessions/session-x", "it contains a path separator", id="path"),
    pytest.param("a..b", "it contains '..'", id="dotdot"),
])
def test_sessions_show_and_tree_refuse_an_invalid_id_in_one_line(dsh, home, command, session_id, problem):
    (home / "sessions").mkdir(parents=True)

    result = dsh("sessions", command, session_id, "--home", home)

    assert result.exit_code == 2
    assert one_line(result).endswith(f"is not a session id: {problem}\n")


@pytest.mark.parametrize("flag", ["--profile", "--overlay", "--transcript"])
def test_a_shipped_name_too_long_for_a_file_name_is_an_unknown_name(dsh, flag):
    """Found by the env fuzz (DSH_PROFILE of 2,000 `[`): a name longer than NAME_MAX used to raise
    `OSError: File name too long` from the shipped-file lookup."""
    result = dsh("config", "show", flag, "[" * 2000)

    assert result.exit_code == 2
    assert one_line(result).startswith(f"dsh: unknown {flag[2:]} '{'[' * 57}...'; available: ")


def test_a_dsh_profile_too_long_for_a_file_name_is_an_unknown_profile(dsh):
    result = dsh("config", "show", env={"DSH_PROFILE": "p" * 5000})

    assert result.exit_code == 2
    assert one_line(result).startswith("dsh: unknown profile 'ppppp")
