"""Typed errors with stable codes.

    DshError(code, message)                 anything a caller may branch on by `code`
    ├── SessionError                        SESSION_CORRUPT, NEWER_FORMAT, SESSION_BUSY, SESSION_CLOSED,
    │                                       UNKNOWN_EVENT, INVALID_LOG, SESSION_UNMATERIALIZED (a
    │                                       directory a crash left before the header was published)
    ├── ReentrantAppend                     REENTRANT_APPEND: an observer tried to append (§4.1)
    ├── CheckpointError                     CHECKPOINT_FAILED: a durability barrier failed (§5.5)
    ├── InboxError                          DUPLICATE_MESSAGE, INVALID_SPLICE
    ├── AgentBusy                           AGENT_BUSY: maintenance asked of a non-idle agent
    ├── StepLimit                           STEP_LIMIT
    ├── ProviderError                       provider failures (§13), with an optional HTTP status
    ├── ToolError / SubagentError           tool failures rendered as T-TOOL-ERROR (§12)
    ├── TranscriptError                     a transcript that does not validate (§15.1)
    └── ConfigError                         configuration errors (exit 2)

Callers branch on `code`, never on message text; messages come from `loader.texts`.
"""

from __future__ import annotations

from typing import Literal, NewType

__all__ = [
    "AgentBusy",
    "CheckpointCode",
    "CheckpointError",
    "ConfigCode",
    "ConfigError",
    "DshError",
    "ErrorCode",
    "HostCode",
    "InboxCode",
    "InboxError",
    "ProviderCode",
    "ProviderError",
    "ReentrantAppend",
    "RuntimeCode",
    "ScriptedCode",
    "SessionCode",
    "SessionError",
    "StepLimit",
    "SubagentCode",
    "SubagentError",
    "ToolError",
    "TranscriptCode",
    "TranscriptError",
    "error_chain",
]

# Each family's codes, closed: a new code is a visible edit here, and a typo at a raise site is a
# type error. The wire and the log carry them as plain strings.
SessionCode = Literal[
    "SESSION_CORRUPT", "NEWER_FORMAT", "SESSION_BUSY", "SESSION_CLOSED", "SESSION_EXISTS",
    "SESSION_NOT_FOUND", "SESSION_UNMATERIALIZED", "SESSION_UNSAFE", "UNKNOWN_EVENT", "INVALID_EVENT", "INVALID_HEADER", "INVALID_LOG",
    "INVALID_SESSION_ID",
]
InboxCode = Literal["DUPLICATE_MESSAGE", "INVALID_SPLICE"]
CheckpointCode = Literal["CHECKPOINT_FAILED"]
ProviderCode = Literal[
    # the OpenAI-compatible provider (§13)
    "AUTH", "BAD_REQUEST", "RATE_LIMITED", "PROVIDER_UNAVAILABLE", "PROVIDER_REJECTED",
    "PROVIDER_OVERLOADED", "CONTENT_FILTERED", "TIMEOUT", "NETWORK", "BAD_RESPONSE", "PROVIDER_ERROR",
    "UNKNOWN_FINISH", "INCOMPLETE_STREAM",
    # the replay provider (§15.3)
    "REPLAY_UNRECORDED_SESSION", "REPLAY_SCRIPT_EXHAUSTED", "REPLAY_PLACEHOLDER",
    "REPLAY_BINDING_CONFLICT", "REPLAY_UNCONSUMED",
    # the run budget (issue 15 finding 9): requests or tokens per run exhausted
    "BUDGET_EXHAUSTED",
]
ScriptedCode = NewType("ScriptedCode", str)
"""A provider code a transcript scripts (§15.2 `error.code`): free-form by design, raised verbatim."""
SubagentCode = Literal[
    "UNAUTHORIZED", "NOT_RESUMABLE", "DRAINING", "ACTIVATION_CLOSING", "PARENT_UNAVAILABLE",
    "DEPTH_EXCEEDED", "DUPLICATE_CHILD", "ACTIVATION_TEARDOWN_FAILED", "SUBAGENT_INCOMPLETE",
    "BUDGET_EXHAUSTED",  # children per run exhausted (issue 15 finding 9)
    "ENGINE_UNSUPPORTED",  # a tool the Temporal engine does not run yet (issue 12, first slice)
    "ENGINE_RUN_FAILED",  # a child's workflow run failed; its notice says so (engines/settle.py)
    "RUNNING_LIMIT",  # an agent already runs temporal.maxRunningChildren children (engines/backends.py)
    "MESSAGE_TOO_LARGE",  # a prompt or message past what a Temporal payload carries (engines/refusals.py)
]
TranscriptCode = Literal["TRANSCRIPT_INVALID"]
ConfigCode = Literal["CONFIG_INVALID", "USAGE", "FENCES_REFUSED", "MISSING_API_KEY", "RESUME_NOT_ROOT",
                     "UNKNOWN_SESSION"]
HostCode = Literal[
    "BAD_ADDRESS", "UNKNOWN_SESSION", "UNROUTABLE_SESSION", "NO_LIVE_RUN", "RPC_TRANSPORT",
    "SOCKET_DIR_UNSAFE", "SOCKET_IN_USE", "NOT_A_CHILD", "HOME_UNUSABLE",
]
RuntimeCode = Literal["REENTRANT_APPEND", "AGENT_BUSY", "STEP_LIMIT", "DUPLICATE_AGENT", "FENCE_TIMEOUT"]
ErrorCode = (
    SessionCode | InboxCode | CheckpointCode | ProviderCode | ScriptedCode | SubagentCode
    | TranscriptCode | ConfigCode | HostCode | RuntimeCode
)


class DshError(Exception):
    """An error a caller may branch on. `code` is stable across releases; `message` is for people."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


class SessionError(DshError):
    def __init__(self, code: SessionCode, message: str) -> None:
        super().__init__(code, message)


class ReentrantAppend(DshError):
    def __init__(self, session_id: str) -> None:
        super().__init__("REENTRANT_APPEND", f"append to {session_id} while another append publishes")


class CheckpointError(DshError):
    def __init__(self, message: str, code: CheckpointCode = "CHECKPOINT_FAILED") -> None:
        super().__init__(code, message)


class InboxError(DshError):
    def __init__(self, code: InboxCode, message: str) -> None:
        super().__init__(code, message)


class AgentBusy(DshError):
    def __init__(self, agent_id: str) -> None:
        super().__init__("AGENT_BUSY", f"agent {agent_id} is not idle")


class StepLimit(DshError):
    def __init__(self, limit: int) -> None:
        super().__init__("STEP_LIMIT", f"the turn reached the step limit of {limit}")


class ProviderError(DshError):
    def __init__(self, code: ProviderCode | ScriptedCode, message: str, *, status: int | None = None) -> None:
        super().__init__(code, message)
        self.status = status


class ToolError(DshError):
    def __init__(self, code: SubagentCode, message: str) -> None:
        super().__init__(code, message)


class SubagentError(ToolError):
    pass


class TranscriptError(DshError):
    def __init__(self, message: str, code: TranscriptCode = "TRANSCRIPT_INVALID") -> None:
        super().__init__(code, message)


class ConfigError(DshError):
    def __init__(self, message: str, code: ConfigCode = "CONFIG_INVALID") -> None:
        super().__init__(code, message)


def error_chain(exc: BaseException) -> str:
    """Render `outer: cause: cause…` (§6.7 step 5) for errors without a code."""
    parts: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur) or type(cur).__name__
        parts.append(text)
        cur = cur.__cause__ or cur.__context__
    return ": ".join(parts)
