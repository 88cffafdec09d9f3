"""The transcript schema as `loader.lean` tables (issue 13): a `dsh run --transcript` validates the
file without importing pydantic when the lean validator is sure, and falls back to
`TranscriptSpec.model_validate` (and its error lines) otherwise. `tests/test_lean.py` derives these
tables from the pydantic models in `schema.py` and `fence_schema.py` and pins that they agree.
"""

from __future__ import annotations

from typing import Any

from dsh.loader.lean import REQUIRED, Field, Record, Schema, camel, validate
from dsh.loader.transcripts.shapes import (
    CONDITION_KINDS,
    FenceShape,
    ReplyShape,
    SpecShape,
    exactly_one_problem,
    first_problem,
    null_hang_is_empty,
    reply_problem,
)

__all__ = ["SCHEMAS", "lean_spec"]

AGENT_KEY_PATTERN = r"^[a-z][a-z0-9-]*$"  # schema.AGENT_KEY_RE
NAME_PATTERN = r"^[a-z0-9-]+$"  # schema.NAME_PATTERN

_STR: tuple[Any, ...] = ("str", {})
_NON_EMPTY: tuple[Any, ...] = ("str", {"min_length": 1})
_POSITIVE: tuple[Any, ...] = ("int", {"ge": 1})


def _f(name: str, kind: tuple[Any, ...], default: Any = REQUIRED) -> Field:
    return Field(name, camel(name), kind, default)


def _opt(kind: tuple[Any, ...]) -> tuple[Any, ...]:
    return ("opt", kind)


def _model(name: str) -> tuple[str, str]:
    return ("model", name)


class _Reply(Record, ReplyShape):
    __slots__ = ()


class _Fence(Record, FenceShape):
    __slots__ = ()


class _TranscriptSpec(Record, SpecShape):
    __slots__ = ()


for _cls, _name in ((_Reply, "Reply"), (_Fence, "Fence"), (_TranscriptSpec, "TranscriptSpec")):
    _cls.__name__ = _cls.__qualname__ = _name


def _one_of(what: str, names: tuple[str, ...]) -> Any:
    return lambda record: exactly_one_problem(record, names, what) is None


_CONDITION_FIELDS = (*CONDITION_KINDS, "all", "any")
_FENCE_FIELDS = ("hold", "maintenance", "fail_checkpoint")

SCHEMAS: dict[str, Schema] = {
    schema.name: schema
    for schema in (
        Schema("ToolCallSpec", (
            _f("id", _NON_EMPTY), _f("name", _NON_EMPTY),
            _f("arguments", ("or", (("dict", _STR, ("any",)), _STR))),
        )),
        Schema("ReplyUsage", (_f("input_tokens", ("int", {"ge": 0})), _f("output_tokens", ("int", {"ge": 0})))),
        Schema("ErrorSpec", (
            _f("code", _NON_EMPTY), _f("message", _STR), _f("status", _opt(("int", {"ge": 100, "le": 599})), None),
        )),
        Schema("HangSpec", (_f("text", _opt(_STR), None),)),
        Schema("Reply", (
            _f("text", _opt(_STR), None),
            _f("reasoning", _opt(_STR), None),
            _f("tool_calls", _opt(("list", _model("ToolCallSpec"))), None),
            _f("usage", _opt(_model("ReplyUsage")), None),
            _f("finish", _opt(("lit", ("stop", "tool-calls", "max-tokens"))), None),
            _f("error", _opt(_model("ErrorSpec")), None),
            _f("hang", _opt(_model("HangSpec")), None),
        ), record=_Reply, before=null_hang_is_empty, after=lambda r: reply_problem(r.model_fields_set) is None),
        Schema("AgentScript", (
            _f("spawned_by", _opt(_NON_EMPTY), None), _f("order", _opt(_POSITIVE), None),
            _f("replies", ("list", _model("Reply"))),
        )),
        Schema("InboxAccepted", (_f("agent", _STR), _f("count", _POSITIVE, 1), _f("kind", _opt(_STR), None))),
        Schema("TurnEnded", (_f("agent", _STR), _f("turn", _POSITIVE))),
        Schema("AgentOnly", (_f("agent", _STR),)),
        Schema("StepReached", (_f("agent", _STR), _f("turn", _POSITIVE), _f("step", _POSITIVE))),
        Schema("Settled", (_f("agent", _STR), _f("count", _POSITIVE, 1))),
        Schema("Condition", (
            _f("inbox_accepted", _opt(_model("InboxAccepted")), None),
            _f("turn_ended", _opt(_model("TurnEnded")), None),
            _f("hang_reached", _opt(_model("AgentOnly")), None),
            _f("parked", _opt(_model("AgentOnly")), None),
            _f("step_reached", _opt(_model("StepReached")), None),
            _f("settled", _opt(_model("Settled")), None),
            _f("all", _opt(("list", _model("Condition"))), None),
            _f("any", _opt(("list", _model("Condition"))), None),
        ), after=_one_of("condition", _CONDITION_FIELDS)),
        Schema("HoldSpec", (
            _f("agent", _STR), _f("turn", _opt(_POSITIVE), None), _f("step", _opt(_POSITIVE), None),
            _f("until", _model("Condition")),
        )),
        Schema("MaintenanceSpec", (_f("agent", _STR), _f("after_turn", _POSITIVE), _f("until", _model("Condition")))),
        Schema("FailCheckpointSpec", (
            _f("agent", _STR), _f("turn", _opt(_POSITIVE), None), _f("step", _opt(_POSITIVE), None),
            _f("message", _STR, "simulated checkpoint failure"),
        )),
        Schema("Fence", (
            _f("hold", _opt(_model("HoldSpec")), None),
            _f("maintenance", _opt(_model("MaintenanceSpec")), None),
            _f("fail_checkpoint", _opt(_model("FailCheckpointSpec")), None),
        ), record=_Fence, after=_one_of("fence", _FENCE_FIELDS)),
        Schema("UserSendSpec", (_f("agent", _STR), _f("text", _NON_EMPTY), _f("when", _model("Condition")))),
        Schema("UserInterruptSpec", (_f("agent", _STR), _f("when", _model("Condition")))),
        Schema("UserAction", (
            _f("interrupt", _opt(_model("UserInterruptSpec")), None), _f("send", _opt(_model("UserSendSpec")), None),
        ), after=_one_of("user action", ("interrupt", "send"))),
        Schema("TranscriptSpec", (
            _f("version", ("lit", (1,))),
            _f("name", ("str", {"pattern": NAME_PATTERN})),
            _f("description", _opt(_STR), None),
            _f("task", _STR),
            _f("overlays", ("list", _STR), []),
            _f("fences", ("list", _model("Fence")), []),
            _f("user", ("list", _model("UserAction")), []),
            _f("agents", ("dict", ("str", {"pattern": AGENT_KEY_PATTERN}), _model("AgentScript"))),
        ), record=_TranscriptSpec, after=lambda spec: first_problem(spec) is None),
    )
}
for _schema in SCHEMAS.values():
    _schema.models = SCHEMAS


def lean_spec(data: Any) -> Any:
    """A `TranscriptSpec`-shaped record of `data`, or None: validate it with pydantic instead."""
    return validate(SCHEMAS["TranscriptSpec"], data)
