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
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from dsh.loader.transcripts.fence_schema import Fence, condition_agents

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
]

AGENT_KEY_RE = re.compile(r"^[a-z][a-z0-9-]*$")
SUBAGENT_TOOL = "subagent"

ReplyForm = Literal["message", "error", "hang"]
AgentKey = Annotated[str, StringConstraints(pattern=AGENT_KEY_RE.pattern)]
NonEmpty = Annotated[str, StringConstraints(min_length=1)]


class LocatedProblem(ValueError):
    """A cross-field problem at `loc`, relative to the model whose validator raised it."""

    def __init__(self, loc: tuple[int | str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


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


_MESSAGE_KEYS = ("text", "reasoning", "tool_calls", "usage", "finish")


class Reply(_Schema):
    """One scripted model response: a message, an `error` (with optional `text`) or a `hang`."""

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
        if isinstance(data, dict) and "hang" in data and data["hang"] is None:
            return {**data, "hang": {}}
        return data

    @model_validator(mode="after")
    def _exactly_one_form(self) -> Reply:
        present = self.model_fields_set
        if not present:
            raise ValueError("a reply needs text, reasoning, toolCalls, error or hang")
        if "hang" in present and len(present) > 1:
            others = ", ".join(sorted(to_camel(k) for k in present - {"hang"}))
            raise ValueError(f"hang cannot be combined with {others} (put a prefix in hang.text)")
        if "error" in present:
            mixed = present & {"reasoning", "tool_calls", "usage", "finish"}
            if mixed:
                others = ", ".join(sorted(to_camel(k) for k in mixed))
                raise ValueError(f"error can only be combined with text, not {others}")
        return self

    @property
    def form(self) -> ReplyForm:
        if self.hang is not None:
            return "hang"
        if self.error is not None:
            return "error"
        return "message"

    @property
    def finish_reason(self) -> Literal["stop", "tool-calls", "max-tokens"]:
        """The served finish reason: explicit, else `tool-calls` with tool calls, else `stop`."""
        if self.finish is not None:
            return self.finish
        return "tool-calls" if self.tool_calls else "stop"


class AgentScript(_Schema):
    spawned_by: NonEmpty | None = None
    order: Annotated[int, Field(ge=1)] | None = None
    replies: list[Reply]


class TranscriptSpec(_Schema):
    version: Literal[1]
    name: Annotated[str, StringConstraints(pattern=r"^[a-z0-9-]+$")]
    description: str | None = None
    task: str
    overlays: list[str] = []
    fences: list[Fence] = []
    agents: dict[AgentKey, AgentScript]

    @model_validator(mode="after")
    def _cross_checks(self) -> TranscriptSpec:
        problem = _first_problem(self)
        if problem is not None:
            raise problem
        return self

    def children(self) -> dict[str, AgentScript]:
        return {key: script for key, script in self.agents.items() if key != "root"}


def _first_problem(spec: TranscriptSpec) -> LocatedProblem | None:
    """The first cross-field problem in document order, or None."""
    if "root" not in spec.agents:
        return LocatedProblem(("agents",), "agents must contain root")
    for check in (_check_binding_keys, _check_tool_call_ids, _check_spawned_by, _check_orders, _check_fences):
        problem = check(spec)
        if problem is not None:
            return problem
    return None


def _check_binding_keys(spec: TranscriptSpec) -> LocatedProblem | None:
    root = spec.agents["root"]
    if root.spawned_by is not None:
        return LocatedProblem(("agents", "root", "spawnedBy"), "root cannot have spawnedBy")
    if root.order is not None:
        return LocatedProblem(("agents", "root", "order"), "root cannot have order")
    for key, script in spec.children().items():
        if script.spawned_by is None and script.order is None:
            return LocatedProblem(
                ("agents", key), "a child needs exactly one of spawnedBy or order"
            )
        if script.spawned_by is not None and script.order is not None:
            return LocatedProblem(
                ("agents", key, "order"),
                "a child needs exactly one of spawnedBy or order, not both",
            )
    return None


def _tool_calls(spec: TranscriptSpec) -> list[tuple[str, int, int, ToolCallSpec]]:
    found: list[tuple[str, int, int, ToolCallSpec]] = []
    for key, script in spec.agents.items():
        for r, reply in enumerate(script.replies):
            for c, call in enumerate(reply.tool_calls or []):
                found.append((key, r, c, call))
    return found


def _check_tool_call_ids(spec: TranscriptSpec) -> LocatedProblem | None:
    seen: dict[str, str] = {}
    for key, r, c, call in _tool_calls(spec):
        if call.id in seen:
            return LocatedProblem(
                ("agents", key, "replies", r, "toolCalls", c, "id"),
                f"tool call id {call.id!r} is already used in agent {seen[call.id]}",
            )
        seen[call.id] = key
    return None


def _check_spawned_by(spec: TranscriptSpec) -> LocatedProblem | None:
    spawner = {call.id: key for key, _, _, call in _tool_calls(spec) if call.name == SUBAGENT_TOOL}
    claimed: dict[str, str] = {}
    for key, script in spec.children().items():
        call_id = script.spawned_by
        if call_id is None:
            continue
        loc = ("agents", key, "spawnedBy")
        if call_id not in spawner:
            return LocatedProblem(loc, f"no agent makes a subagent tool call with id {call_id!r}")
        if spawner[call_id] == key:
            return LocatedProblem(loc, f"{call_id!r} is this agent's own tool call")
        if call_id in claimed:
            return LocatedProblem(
                loc, f"{call_id!r} is already the spawnedBy of {claimed[call_id]}"
            )
        claimed[call_id] = key
    return None


def _check_orders(spec: TranscriptSpec) -> LocatedProblem | None:
    ordered = [(key, s.order) for key, s in spec.children().items() if s.order is not None]
    k = len(ordered)
    used: dict[int, str] = {}
    for key, order in ordered:
        loc = ("agents", key, "order")
        if order > k:
            return LocatedProblem(
                loc, f"order values must be 1..{k} without gaps ({k} children bind by order)"
            )
        if order in used:
            return LocatedProblem(loc, f"order {order} is already used by {used[order]}")
        used[order] = key
    return None


def _check_fences(spec: TranscriptSpec) -> LocatedProblem | None:
    for i, fence in enumerate(spec.fences):
        inner = fence.spec
        kind = fence.kind
        allowed = set(spec.agents) | ({"*children"} if kind == "hold" else set())
        if inner.agent not in allowed:
            return LocatedProblem(("fences", i, kind, "agent"), f"no agent {inner.agent!r} in this transcript")
        until = getattr(inner, "until", None)
        if until is not None:
            for loc, key in condition_agents(until):
                if key not in spec.agents:
                    return LocatedProblem(("fences", i, kind, "until", *loc), f"no agent {key!r} in this transcript")
    return None
