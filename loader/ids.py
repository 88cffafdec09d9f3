"""Identifiers (SPEC §5.1, issue 11 item 4): every new session id, root or child, is
`session-<uuid4>`; message ids are bare uuid4. Children created before issue 11 have bare uuid4 ids;
they still pass the validator below and keep loading, since any id matching it is a session id.

One validator for every id that names a session, whoever typed it (issue 15 items 4, 6): a CLI
argument, an address `<parent>/<child>`, an RPC param or a `parentSession` link. A session id
becomes a directory name under `sessions/`, so it must be a single, harmless path component:
1–128 ASCII letters, digits, `.`, `_` or `-`, starting with a letter or digit (so no `/`, no
leading `.`, no `..` component), and no `..` anywhere, so it can never be read as a step up. Every
id dsh makes (`session-<uuid4>`, a uuid4) passes.

Stdlib only: `dsh interrupt` imports this through the RPC client and must start fast.
"""

from __future__ import annotations

import os
import re

from dsh.loader.errors import DshError

__all__ = [
    "MAX_SESSION_ID_LENGTH",
    "SESSION_ID_RE",
    "InvalidSessionId",
    "check_session_id",
    "is_valid_session_id",
    "new_child_id",
    "new_message_id",
    "new_root_id",
    "session_id_problem",
]

MAX_SESSION_ID_LENGTH = 128
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""The charset and length rule; `is_valid_session_id` adds the `..` rule, which a regex engine
without look-ahead (pydantic's) cannot express. Always `fullmatch`: `$` also matches before a
final newline."""


class InvalidSessionId(DshError):
    """A value that cannot be a session id; nothing was read or written for it (CLI exit 2)."""

    def __init__(self, value: str, problem: str) -> None:
        super().__init__("INVALID_SESSION_ID", f"{_shown(value)} is not a session id: {problem}")
        self.value = value
        self.problem = problem


def _uuid4() -> str:
    """`str(uuid.uuid4())`, the same format and randomness (16 bytes of `os.urandom`, the version
    and variant bits set), without building a `UUID` object: 2 ids per model call, 5 per child of a
    fan-out (issue 13)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # variant RFC 4122
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_root_id() -> str:
    return f"session-{_uuid4()}"


def new_child_id() -> str:
    """The same format as a root's (issue 11 item 4): an id never tells a root from a child; the
    header's `parentSession` does."""
    return f"session-{_uuid4()}"


new_message_id = _uuid4  # a message id is a bare uuid4 (no frame of its own: 2 per model call)


def session_id_problem(value: object) -> str | None:
    """Why `value` is not a session id, or None when it is one."""
    if not isinstance(value, str):
        return "it is not a string"
    if not value:
        return "it is empty"
    if len(value) > MAX_SESSION_ID_LENGTH:
        return f"it is longer than {MAX_SESSION_ID_LENGTH} characters"
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if ".." in value:
        return "it contains '..'"
    if SESSION_ID_RE.fullmatch(value) is None:
        return "use letters, digits, '.', '_' and '-', starting with a letter or digit"
    return None


def is_valid_session_id(value: object) -> bool:
    return session_id_problem(value) is None


def check_session_id(value: str) -> str:
    """`value` itself, or `InvalidSessionId` saying what is wrong with it."""
    problem = session_id_problem(value)
    if problem is not None:
        raise InvalidSessionId(value, problem)
    return value


def _shown(value: str) -> str:
    # The value goes into one line of stderr: clip it and escape control characters.
    clipped = value if len(value) <= 60 else value[:57] + "..."
    return repr(clipped)
