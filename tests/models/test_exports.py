"""`loader.models` public surface: widening it should be a visible decision (STYLE §2)."""

from __future__ import annotations

import dsh.loader.models

from dsh import loader


def test_models_exports_exactly_the_pinned_names() -> None:
    assert sorted(loader.models.__all__) == sorted(
        [
            "DEFAULT_USAGE",
            "AssembledMessage",
            "Assembler",
            "Chunk",
            "Finish",
            "FinishReason",
            "FunctionInfo",
            "FunctionProvider",
            "FunctionReply",
            "ModelFunction",
            "ModelProvider",
            "ModelRequest",
            "OnRetry",
            "OpenAICompatibleProvider",
            "ReasoningDelta",
            "Recorder",
            "ReplayProvider",
            "TextDelta",
            "ToolCall",
            "ToolCallDelta",
            "Usage",
        ]
    )
    assert all(hasattr(loader.models, name) for name in loader.models.__all__)
