"""Transcripts, keyless replay scenarios (SPEC §15): schema, located loading, placeholders."""

from __future__ import annotations

from dsh.loader.transcripts.load import Transcript, format_validation_error, load_transcript
from dsh.loader.transcripts.placeholders import (
    PlaceholderKind,
    UnresolvedPlaceholder,
    resolve_placeholders,
)
from dsh.loader.transcripts.schema import (
    AgentScript,
    ErrorSpec,
    HangSpec,
    Reply,
    ReplyForm,
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
