"""Constructors for the manager's typed errors (SPEC §12.6), so each wording lives in `texts.py`."""

from __future__ import annotations

from dsh.loader.errors import SubagentCode, SubagentError
from dsh.loader.texts import render

__all__ = ["err"]


def err(code: SubagentCode, tid: str, **values: object) -> SubagentError:
    return SubagentError(code, render(tid, **values))
