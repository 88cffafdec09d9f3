"""Model providers (SPEC §13): the protocol, the assembler and the replay provider.

`agent/` imports only the protocol names from here; `headless` picks the provider.
"""

from __future__ import annotations

from loader.models.assembler import AssembledMessage, Assembler
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
    "ReasoningDelta",
    "ReplayProvider",
    "TextDelta",
    "ToolCallDelta",
    "Usage",
]
