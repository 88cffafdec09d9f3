"""Where a run's control socket lives (SPEC §18.1, §5.1).

The server binds it and the client connects to it without talking to each other first, so both must
derive the same path from the same two inputs: the home and the root session id. The home is
resolved (absolute, symlinks followed) before anything else, so `--home ./x` and `--home /abs/x`, or a
symlinked home, name the same socket.

`sun_path` holds ~107 bytes on Linux (~103 on macOS); a deep home would make `home/run/<root>.sock`
unbindable, hence the fallback under `${XDG_RUNTIME_DIR:-/tmp}` keyed by uid and a hash of the home.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["MAX_SOCKET_PATH_BYTES", "socket_path"]

MAX_SOCKET_PATH_BYTES = 100


def socket_path(home: Path, root_id: str, environ: Mapping[str, str] | None = None) -> Path:
    """`home/run/<root>.sock`, or, when that exceeds 100 bytes,
    `${XDG_RUNTIME_DIR:-/tmp}/dsh-<uid>-<sha256(home)[:12]>/<root>.sock` (an empty variable counts as
    unset, as with the shell's `:-`). `environ` defaults to `os.environ`."""
    resolved = Path(home).expanduser().resolve()
    primary = resolved / "run" / f"{root_id}.sock"
    if len(os.fsencode(primary)) <= MAX_SOCKET_PATH_BYTES:
        return primary
    env = os.environ if environ is None else environ
    base = env.get("XDG_RUNTIME_DIR") or "/tmp"
    digest = hashlib.sha256(os.fsencode(resolved)).hexdigest()[:12]
    return Path(base) / f"dsh-{os.getuid()}-{digest}" / f"{root_id}.sock"
