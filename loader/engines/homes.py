"""A worker's home as Temporal knows it: a stable id and the home queue named from it
(loader/engines/README.md "Homes: workers without a shared home").

Every worker with `--home` serves the tree's shared task queue and also `<taskQueue>@<home id>`;
workers on one machine sharing one home share that queue. The id is a random token created once in
the home (`home-id`, 0600 in a 0700 home, as our session files and directories are), so a home
copied or moved keeps its queue and two homes never share one by accident of their paths.

Invariants:
- the token is written once: created with `O_CREAT|O_EXCL|O_NOFOLLOW` beside a rename-free read, so
  two workers starting at once on one home agree on one id (the loser reads the winner's);
- symlinks are not followed (a planted `home-id` link is refused, not read through).
"""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path

from dsh.loader.errors import ConfigError
from dsh.loader.texts import render

__all__ = ["HOME_ID_FILE", "home_id", "home_queue"]

HOME_ID_FILE = "home-id"
_TOKEN_BYTES = 12


def home_queue(task_queue: str, home_token: str) -> str:
    """The queue of the workers of one home, beside the shared `task_queue`."""
    return f"{task_queue}@{home_token}"


def home_id(home: Path) -> str:
    """The home's token, created on first use (the home itself too, 0700)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / HOME_ID_FILE
    token = secrets.token_hex(_TOKEN_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return _read(path)
    try:
        os.write(fd, (token + "\n").encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return token


def _read(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(render("T-ENGINE-HOME-ID", path=path), code="CONFIG_INVALID") from exc
        raise
    try:
        text = os.read(fd, 256).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not text:  # a peer is writing it this instant (created, not yet written): ours is as good
        raise ConfigError(render("T-ENGINE-HOME-ID", path=path), code="CONFIG_INVALID")
    return text
