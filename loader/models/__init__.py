"""Model providers (SPEC §13): the protocol, the assembler, the OpenAI-compatible, replay and
function providers, and the recorder.

`agent/` imports only the protocol names from here; `headless` picks the provider. The live
provider and the recorder load lazily (httpx, httpx-sse, ruamel.yaml): a replay run never pays for
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.loader.models.assembler import AssembledMessage, Assembler
from dsh.loader.models.function import FunctionInfo, FunctionProvider, FunctionReply, ModelFunction, ToolCall
from dsh.loader.models.protocol import (
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
from dsh.loader.models.replay import DEFAULT_USAGE, ReplayProvider

if TYPE_CHECKING:
    from dsh.loader.models.openai import OpenAICompatibleProvider as OpenAICompatibleProvider
    from dsh.loader.models.recorder import Recorder as Recorder

__all__ = [
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


def __getattr__(name: str) -> Any:
    if name == "OpenAICompatibleProvider":
        from dsh.loader.models.openai import OpenAICompatibleProvider

        return OpenAICompatibleProvider
    if name == "Recorder":
        from dsh.loader.models.recorder import Recorder

        return Recorder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
