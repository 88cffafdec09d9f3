"""Model providers (SPEC §13): the protocol, the assembler, the OpenAI-compatible and replay
providers, and the recorder.

`agent/` imports only the protocol names from here; `headless` picks the provider.
"""

from __future__ import annotations

from loader.models.assembler import AssembledMessage, Assembler
from loader.models.openai import OpenAICompatibleProvider
from loader.models.protocol import (
    Chunk,
    Finish,
    FinishReason,
    ModelProvider,
    ModelRequest,
    OnRetry,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from loader.models.recorder import Recorder
from loader.models.replay import DEFAULT_USAGE, ReplayProvider

__all__ = [
    "DEFAULT_USAGE",
    "AssembledMessage",
    "Assembler",
    "Chunk",
    "Finish",
    "FinishReason",
    "ModelProvider",
    "ModelRequest",
    "OnRetry",
    "OpenAICompatibleProvider",
    "ReasoningDelta",
    "Recorder",
    "ReplayProvider",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]
