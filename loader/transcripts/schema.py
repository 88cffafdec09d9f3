"""Transcript schema (SPEC §15.1): keyless replay scenarios as pydantic models.

Every model forbids unknown keys and takes camelCase keys (snake_case names also work). Validation
that spans the whole document (tool call ids unique, `spawnedBy` targets, `order` 1..k, root and
child binding keys) lives in `TranscriptSpec`'s after-validator and raises `LocatedProblem`, a
`ValueError` carrying the `loc` of the offending key *relative to the model that raised it*.
pydantic keeps the exception in the error's `ctx["error"]`, so the loader can point at the exact key
instead of at the document root.

Decisions where §15.1 leaves room:
- A reply must have at least one key: `{}` is rejected (a recorder never writes it).
- `toolCalls[].arguments` is required; a string is kept verbatim and not parsed, because the
  recorder writes invalid JSON from the model as the raw string (§15.5).
- `hang:` with a null value means `hang: {}`.
- Two children may not name the same `spawnedBy` call (binding would always conflict).
- Fences follow `fence_schema.py`; every agent a fence or condition names must be an agent key.
- What the user did during a recorded run (issue 12 "Not yet" item 4) is a top-level `user` list,
  not fences (fences never cancel or send, §16): `interrupt: {agent, when: COND}` (the runner's
  `dsh interrupt` once COND holds) and `send: {agent, text, when: COND}` (its `dsh send`), COND
  being a fence condition (§16.1). Only a child can be their target, as only a child can be
  addressed as `<root>/<child>`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from dsh.loader.transcripts.fence_schema import Condition, Fence
from dsh.loader.transcripts.shapes import (
    LocatedProblem,
    ReplyShape,
    SpecShape,
    exactly_one_problem,
    first_problem,
    null_hang_is_empty,
    reply_problem,
)

__all__ = [
    "AGENT_KEY_RE",
    "AgentScript",
    "ErrorSpec",
    "HangSpec",
    "LocatedProblem",
    "Reply",
    "ReplyForm",
    "ReplyUsage",
    "ToolCallSpec",
    "TranscriptSpec",
    "UserAction",
    "UserInterruptSpec",
    "UserSendSpec",
]

AGENT_KEY_RE = re.compile(r"^[a-z][a-z0-9-]*$")
NAME_PATTERN = r"^[a-z0-9-]+$"

ReplyForm = Literal["message", "error", "hang"]
AgentKey = Annotated[str, StringConstraints(pattern=AGENT_KEY_RE.pattern)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class _Schema(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class ToolCallSpec(_Schema):
    id: NonEmpty
    name: NonEmpty
    arguments: dict[str, Any] | str


class ReplyUsage(_Schema):
    input_tokens: Annotated[int, Field(ge=0)]
    output_tokens: Annotated[int, Field(ge=0)]


class ErrorSpec(_Schema):
    code: NonEmpty
    message: str
    status: Annotated[int, Field(ge=100, le=599)] | None = None


class HangSpec(_Schema):
    text: str | None = None


class Reply(_Schema, ReplyShape):
    """One scripted model response: a message, an `error` (with optional `text`) or a `hang`.
    `form` and `finish_reason` come from `ReplyShape` (shared with the lean record, issue 13)."""

    text: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallSpec] | None = None
    usage: ReplyUsage | None = None
    finish: Literal["stop", "tool-calls", "max-tokens"] | None = None
    error: ErrorSpec | None = None
    hang: HangSpec | None = None

    @model_validator(mode="before")
    @classmethod
    def _null_hang_is_empty(cls, data: Any) -> Any:
        return null_hang_is_empty(data)

    @model_validator(mode="after")
    def _exactly_one_form(self) -> Reply:
        problem = reply_problem(self.model_fields_set)
        if problem is not None:
            raise ValueError(problem)
        return self


class AgentScript(_Schema):
    spawned_by: NonEmpty | None = None
    order: Annotated[int, Field(ge=1)] | None = None
    replies: list[Reply]


class UserSendSpec(_Schema):
    """A `dsh send <root>/<agent> text`, made once `when` holds (a fence condition, §16.1)."""

    agent: str
    text: NonEmpty
    when: Condition


class UserInterruptSpec(_Schema):
    """A `dsh interrupt <root>/<agent>`, made once `when` holds."""

    agent: str
    when: Condition


class UserAction(_Schema):
    interrupt: UserInterruptSpec | None = None
    send: UserSendSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> UserAction:
        problem = exactly_one_problem(self, ("interrupt", "send"), "user action")
        if problem is not None:
            raise ValueError(problem)
        return self


class TranscriptSpec(_Schema, SpecShape):
    version: Literal[1]
    name: Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
    description: str | None = None
    task: str
    overlays: list[str] = []
    fences: list[Fence] = []
    user: list[UserAction] = []
    agents: dict[AgentKey, AgentScript]

    @model_validator(mode="after")
    def _cross_checks(self) -> TranscriptSpec:
        problem = first_problem(self)
        if problem is not None:
            raise problem
        return self
