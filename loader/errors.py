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

__all__ = [
    "AgentBusy",
    "CheckpointError",
    "ConfigError",
    "DshError",
    "InboxError",
    "ProviderError",
    "ReentrantAppend",
    "SessionError",
    "StepLimit",
    "SubagentError",
    "ToolError",
    "TranscriptError",
    "error_chain",
]


class DshError(Exception):
    """An error a caller may branch on. `code` is stable across releases; `message` is for people."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return self.message


class SessionError(DshError):
    pass


class ReentrantAppend(DshError):
    def __init__(self, session_id: str) -> None:
        super().__init__("REENTRANT_APPEND", f"append to {session_id} while another append publishes")


class CheckpointError(DshError):
    def __init__(self, message: str, code: str = "CHECKPOINT_FAILED") -> None:
        super().__init__(code, message)


class InboxError(DshError):
    pass


class AgentBusy(DshError):
    def __init__(self, agent_id: str) -> None:
        super().__init__("AGENT_BUSY", f"agent {agent_id} is not idle")


class StepLimit(DshError):
    def __init__(self, limit: int) -> None:
        super().__init__("STEP_LIMIT", f"the turn reached the step limit of {limit}")


class ProviderError(DshError):
    def __init__(self, code: str, message: str, *, status: int | None = None) -> None:
        super().__init__(code, message)
        self.status = status


class ToolError(DshError):
    pass


class SubagentError(ToolError):
    pass


class TranscriptError(DshError):
    def __init__(self, message: str, code: str = "TRANSCRIPT_INVALID") -> None:
        super().__init__(code, message)


class ConfigError(DshError):
    def __init__(self, message: str, code: str = "CONFIG_INVALID") -> None:
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
