"""What transcript models and their lean records share (issue 13): the properties the runtime reads
(`Reply.form`, `Fence.kind`, …) and the document-wide checks. Pydantic-free, so that a transcript
validated by `loader.lean` behaves as one validated by `loader.transcripts.schema`.

The mixins declare no annotations (pydantic would take them for fields); the checks read attributes
only, so they run on either kind of spec.
"""

from __future__ import annotations

from typing import Any, Literal

from dsh.loader.lean import camel

__all__ = ["FenceShape", "LocatedProblem", "ReplyShape", "SpecShape", "condition_agents", "first_problem"]

SUBAGENT_TOOL = "subagent"
ReplyForm = Literal["message", "error", "hang"]
FinishReason = Literal["stop", "tool-calls", "max-tokens"]
CONDITION_KINDS = ("inbox_accepted", "turn_ended", "hang_reached", "parked", "step_reached", "settled")


class LocatedProblem(ValueError):
    """A cross-field problem at `loc`, relative to the model whose validator raised it."""

    def __init__(self, loc: tuple[int | str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


class ReplyShape:
    """`Reply`'s served form and finish reason."""

    __slots__ = ()

    @property
    def form(self) -> ReplyForm:
        if self.hang is not None:  # type: ignore[attr-defined]
            return "hang"
        if self.error is not None:  # type: ignore[attr-defined]
            return "error"
        return "message"

    @property
    def finish_reason(self) -> FinishReason:
        """The served finish reason: explicit, else `tool-calls` with tool calls, else `stop`."""
        finish: FinishReason | None = self.finish  # type: ignore[attr-defined]
        if finish is not None:
            return finish
        return "tool-calls" if self.tool_calls else "stop"  # type: ignore[attr-defined]


def null_hang_is_empty(data: Any) -> Any:
    """`hang:` with a null value means `hang: {}` (a before-validator of `Reply`)."""
    if isinstance(data, dict) and "hang" in data and data["hang"] is None:
        return {**data, "hang": {}}
    return data


def reply_problem(present: set[str]) -> str | None:
    """What `Reply`'s form rule says of the keys given (`model_fields_set`), or None."""
    if not present:
        return "a reply needs text, reasoning, toolCalls, error or hang"
    if "hang" in present and len(present) > 1:
        others = ", ".join(sorted(camel(k) for k in present - {"hang"}))
        return f"hang cannot be combined with {others} (put a prefix in hang.text)"
    if "error" in present:
        mixed = present & {"reasoning", "tool_calls", "usage", "finish"}
        if mixed:
            others = ", ".join(sorted(camel(k) for k in mixed))
            return f"error can only be combined with text, not {others}"
    return None


def exactly_one_problem(model: Any, names: tuple[str, ...], what: str) -> str | None:
    """A fence or condition must set exactly one of its keys (not None)."""
    present = [k for k in model.model_fields_set if getattr(model, k) is not None]
    if len(present) != 1:
        return f"a {what} needs exactly one of {', '.join(camel(k) for k in names)}"
    return None


class FenceShape:
    """`Fence.kind` and `Fence.spec`."""

    __slots__ = ()

    @property
    def kind(self) -> str:
        return "hold" if self.hold else "maintenance" if self.maintenance else "failCheckpoint"  # type: ignore[attr-defined]

    @property
    def spec(self) -> Any:
        return self.hold or self.maintenance or self.fail_checkpoint  # type: ignore[attr-defined]


class SpecShape:
    """`TranscriptSpec.children()` and `scripts_user()`."""

    __slots__ = ()

    def children(self) -> dict[str, Any]:
        return {key: script for key, script in self.agents.items() if key != "root"}  # type: ignore[attr-defined]

    def scripts_user(self) -> bool:
        """Whether the transcript scripts the user (`scripted_user.py`)."""
        return bool(self.user)  # type: ignore[attr-defined]


def condition_agents(cond: Any) -> list[tuple[tuple[Any, ...], str]]:
    """(relative loc, agent key) of every agent named inside a condition, for load-time checks."""
    out: list[tuple[tuple[Any, ...], str]] = []
    for name in CONDITION_KINDS:
        part = getattr(cond, name)
        if part is not None:
            out.append(((camel(name), "agent"), part.agent))
    for name in ("all", "any"):
        for i, sub in enumerate(getattr(cond, name) or []):
            out.extend(((name, i, *loc), key) for loc, key in condition_agents(sub))
    return out


def first_problem(spec: Any) -> LocatedProblem | None:
    """The first cross-field problem in document order, or None."""
    if "root" not in spec.agents:
        return LocatedProblem(("agents",), "agents must contain root")
    for check in (_check_binding_keys, _check_tool_call_ids, _check_spawned_by, _check_orders, _check_fences,
                  _check_user):
        problem = check(spec)
        if problem is not None:
            return problem
    return None


def _check_binding_keys(spec: Any) -> LocatedProblem | None:
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


def _tool_calls(spec: Any) -> list[tuple[str, int, int, Any]]:
    found: list[tuple[str, int, int, Any]] = []
    for key, script in spec.agents.items():
        for r, reply in enumerate(script.replies):
            for c, call in enumerate(reply.tool_calls or []):
                found.append((key, r, c, call))
    return found


def _check_tool_call_ids(spec: Any) -> LocatedProblem | None:
    seen: dict[str, str] = {}
    for key, r, c, call in _tool_calls(spec):
        if call.id in seen:
            return LocatedProblem(
                ("agents", key, "replies", r, "toolCalls", c, "id"),
                f"tool call id {call.id!r} is already used in agent {seen[call.id]}",
            )
        seen[call.id] = key
    return None


def _check_spawned_by(spec: Any) -> LocatedProblem | None:
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


def _check_orders(spec: Any) -> LocatedProblem | None:
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


def _check_fences(spec: Any) -> LocatedProblem | None:
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


def _check_user(spec: Any) -> LocatedProblem | None:
    """The user's actions address a child, as `dsh interrupt` and `dsh send` take `<root>/<child>`;
    a `when` condition names agents of this transcript."""
    for i, action in enumerate(spec.user):
        kind = "interrupt" if action.interrupt is not None else "send"
        part = action.interrupt or action.send
        loc = ("user", i, kind)
        if part.agent == "root":
            return LocatedProblem((*loc, "agent"), f"the user {kind}s children only (dsh {kind} <root>/<child>)")
        if part.agent not in spec.agents:
            return LocatedProblem((*loc, "agent"), f"no agent {part.agent!r} in this transcript")
        for cloc, key in condition_agents(part.when):
            if key not in spec.agents:
                return LocatedProblem((*loc, "when", *cloc), f"no agent {key!r} in this transcript")
    return None
