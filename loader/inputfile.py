"""Reading an input file someone else may have handed us: a profile, an overlay or a transcript.

Issue 15 items 1, 2, 4, 7: such a file may be a FIFO (which would block `open` and `read` forever), a
device (`/dev/zero` never ends), a symlink pointing anywhere, or simply huge. `read_input` opens it
with `O_NOFOLLOW | O_NONBLOCK`, so neither a symlink nor a FIFO without a writer can hold us, then
`fstat`s the open descriptor (not the path, which could be swapped in between) and refuses anything
but a regular file. It reads at most the size limit plus one byte, so a file that grows while we
read is still bounded.

The limit is `DEFAULT_MAX_INPUT_BYTES` (8 MiB) unless `DSH_MAX_INPUT_BYTES` holds a positive decimal
integer of bytes. The variable is read here rather than through `loader.config` because it bounds
the reading of the config files themselves; like `compose`, callers may pass `environ`.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DEFAULT_MAX_INPUT_BYTES", "MAX_INPUT_ENV", "InputRefused", "max_input_bytes", "read_input"]

DEFAULT_MAX_INPUT_BYTES = 8 * 1024 * 1024
MAX_INPUT_ENV = "DSH_MAX_INPUT_BYTES"
_MAX_LIMIT_DIGITS = 15  # about 1 PB: any longer value is a typo, not a limit


class InputRefused(Exception):
    """The file cannot be read as an input. `str()` is `<path>: <problem>`; callers re-raise it as
    their own error type (`ConfigError`, `TranscriptError`) so the exit code stays theirs."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


def max_input_bytes(environ: Mapping[str, str] | None = None) -> int:
    """The size limit: `DSH_MAX_INPUT_BYTES` when set and non-empty, else 8 MiB; `ValueError`
    when the variable holds anything but a positive decimal number."""
    env = os.environ if environ is None else environ
    raw = env.get(MAX_INPUT_ENV, "").strip()
    if not raw:
        return DEFAULT_MAX_INPUT_BYTES
    if not raw.isdigit() or not raw.isascii() or len(raw) > _MAX_LIMIT_DIGITS or int(raw) < 1:
        raise ValueError(f"environment {MAX_INPUT_ENV}: expected a positive number of bytes, got {raw[:40]!r}")
    return int(raw)


def read_input(path: Path, *, limit: int | None = None, environ: Mapping[str, str] | None = None) -> bytes:
    """The bytes of a regular file at `path`, refusing symlinks, non-regular files and files over
    the limit with `InputRefused`; an unreadable file is refused too (with the OS reason)."""
    try:
        bound = max_input_bytes(environ) if limit is None else limit
    except ValueError as exc:
        raise InputRefused(path, f"not read: {exc}") from None
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise InputRefused(path, "no such file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputRefused(path, "is a symbolic link; give the path of the file itself") from None
        raise InputRefused(path, f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputRefused(path, f"is {_kind(st.st_mode)}, not a regular file; refusing to read it")
        if st.st_size > bound:
            raise InputRefused(path, _too_large(st.st_size, bound))
        chunks: list[bytes] = []
        size = 0
        while size <= bound:
            try:
                chunk = os.read(fd, min(1 << 20, bound + 1 - size))
            except OSError as exc:
                raise InputRefused(path, f"cannot be read ({exc.strerror})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > bound:
            raise InputRefused(path, _too_large(size, bound))
        return b"".join(chunks)
    finally:
        os.close(fd)


def _too_large(size: int, bound: int) -> str:
    return f"is larger than the input limit of {bound} bytes ({size} bytes; raise it with {MAX_INPUT_ENV})"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a special file"
