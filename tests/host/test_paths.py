"""`socket_path` (SPEC §18.1): server and client derive the same path from home and root id alone."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dsh.loader.host import socket_path

ROOT = "session-5f0c1d2e-0000-4000-8000-000000000000"


def test_short_home_uses_run_directory_under_home(tmp_path: Path) -> None:
    home = Path("/h")
    assert socket_path(home, ROOT, environ={}) == Path(f"/h/run/{ROOT}.sock")


def test_path_of_exactly_100_bytes_stays_under_home() -> None:
    tail = f"/run/{ROOT}.sock"
    home = Path("/" + "a" * (100 - len(tail) - 1))
    path = socket_path(home, ROOT, environ={})
    assert len(os.fsencode(path)) == 100
    assert path == home / "run" / f"{ROOT}.sock"


def test_long_home_falls_back_to_runtime_dir_keyed_by_uid_and_home_hash() -> None:
    home = Path("/" + "a" * 100)
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:12]
    path = socket_path(home, ROOT, environ={"XDG_RUNTIME_DIR": "/run/user/7"})
    assert path == Path(f"/run/user/7/dsh-{os.getuid()}-{digest}/{ROOT}.sock")


def test_fallback_uses_tmp_when_runtime_dir_is_unset_or_empty() -> None:
    home = Path("/" + "a" * 100)
    unset = socket_path(home, ROOT, environ={})
    empty = socket_path(home, ROOT, environ={"XDG_RUNTIME_DIR": ""})
    assert unset == empty
    assert unset.parent.parent == Path("/tmp")


def test_relative_and_symlinked_homes_name_the_same_socket(tmp_path: Path, monkeypatch) -> None:
    real = tmp_path / ("r" * 90)
    real.mkdir()
    link = tmp_path / "l"
    link.symlink_to(real)
    monkeypatch.chdir(tmp_path)
    env = {"XDG_RUNTIME_DIR": "/x"}
    assert socket_path(real, ROOT, env) == socket_path(link, ROOT, env) == socket_path(Path("l"), ROOT, env)
