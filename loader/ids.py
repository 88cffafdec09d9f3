"""Identifiers (SPEC §5.1): root ids `session-<uuid4>`, child and message ids bare uuid4."""

from __future__ import annotations

import re
import uuid

__all__ = ["SESSION_ID_RE", "is_valid_session_id", "new_child_id", "new_message_id", "new_root_id"]

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def new_root_id() -> str:
    return f"session-{uuid.uuid4()}"


def new_child_id() -> str:
    return str(uuid.uuid4())


def new_message_id() -> str:
    return str(uuid.uuid4())


def is_valid_session_id(value: str) -> bool:
    return bool(SESSION_ID_RE.fullmatch(value))
