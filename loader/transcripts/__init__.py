"""Transcripts, keyless replay scenarios (SPEC §15): schema, located loading, placeholders.

The pydantic models (`schema`, `fence_schema`) are imported on first use of their names, not with
the package: a `dsh run --transcript` validates with `lean` and never loads pydantic (issue 13).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.loader.transcripts.load import Transcript, format_validation_error, load_transcript
from dsh.loader.transcripts.placeholders import (
    PlaceholderKind,
    UnresolvedPlaceholder,
    resolve_placeholders,
)
from dsh.loader.transcripts.shapes import ReplyForm

if TYPE_CHECKING:
    from dsh.loader.transcripts.schema import (
        AgentScript,
        ErrorSpec,
        HangSpec,
        Reply,
        ReplyUsage,
        ToolCallSpec,
        TranscriptSpec,
    )

__all__ = [
    "AgentScript",
    "ErrorSpec",
    "HangSpec",
    "PlaceholderKind",
    "Reply",
    "ReplyForm",
    "ReplyUsage",
    "ToolCallSpec",
    "Transcript",
    "TranscriptSpec",
    "UnresolvedPlaceholder",
    "format_validation_error",
    "load_transcript",
    "resolve_placeholders",
]

_MODELS = frozenset({"AgentScript", "ErrorSpec", "HangSpec", "Reply", "ReplyUsage", "ToolCallSpec", "TranscriptSpec"})


def __getattr__(name: str) -> object:
    if name in _MODELS:
        from dsh.loader.transcripts import schema

        return getattr(schema, name)
    raise AttributeError(f"module 'dsh.loader.transcripts' has no attribute {name!r}")
