"""`loader.transcripts` public surface: widening it should be a visible decision (STYLE §2)."""

from __future__ import annotations

import dsh.loader.transcripts

from dsh import loader


def test_transcripts_exports_exactly_the_pinned_names() -> None:
    assert sorted(loader.transcripts.__all__) == sorted(
        [
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
    )
    assert all(hasattr(loader.transcripts, name) for name in loader.transcripts.__all__)
