"""Fence vocabulary (SPEC §16.1) as pydantic models; the runtime lives in `loader.fences`.

Each fence and each condition is a one-key mapping (`hold:`, `inboxAccepted:` …); exactly one key
must be present. Agent names are transcript agent keys (`*children` only in `hold`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "Condition",
    "FailCheckpointSpec",
    "Fence",
    "HoldSpec",
    "MaintenanceSpec",
    "condition_agents",
]

Positive = Annotated[int, Field(ge=1)]


class _Schema(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


def _exactly_one(model: BaseModel, what: str) -> None:
    present = [k for k in model.model_fields_set if getattr(model, k) is not None]
    if len(present) != 1:
        names = ", ".join(to_camel(k) for k in type(model).model_fields)
        raise ValueError(f"a {what} needs exactly one of {names}")


class InboxAccepted(_Schema):
    agent: str
    count: Positive = 1
    kind: str | None = None


class TurnEnded(_Schema):
    agent: str
    turn: Positive


class AgentOnly(_Schema):
    agent: str


class StepReached(_Schema):
    agent: str
    turn: Positive
    step: Positive


class Settled(_Schema):
    agent: str
    count: Positive = 1


class Condition(_Schema):
    inbox_accepted: InboxAccepted | None = None
    turn_ended: TurnEnded | None = None
    hang_reached: AgentOnly | None = None
    parked: AgentOnly | None = None
    step_reached: StepReached | None = None
    settled: Settled | None = None
    all: list[Condition] | None = None
    any: list[Condition] | None = None

    @model_validator(mode="after")
    def _one(self) -> Condition:
        _exactly_one(self, "condition")
        return self


class HoldSpec(_Schema):
    agent: str
    turn: Positive | None = None
    step: Positive | None = None
    until: Condition


class MaintenanceSpec(_Schema):
    agent: str
    after_turn: Positive
    until: Condition


class FailCheckpointSpec(_Schema):
    agent: str
    turn: Positive | None = None
    step: Positive | None = None
    message: str = "simulated checkpoint failure"


class Fence(_Schema):
    hold: HoldSpec | None = None
    maintenance: MaintenanceSpec | None = None
    fail_checkpoint: FailCheckpointSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> Fence:
        _exactly_one(self, "fence")
        return self

    @property
    def kind(self) -> str:
        return "hold" if self.hold else "maintenance" if self.maintenance else "failCheckpoint"

    @property
    def spec(self) -> HoldSpec | MaintenanceSpec | FailCheckpointSpec:
        return self.hold or self.maintenance or self.fail_checkpoint  # type: ignore[return-value]


def condition_agents(cond: Condition) -> list[tuple[tuple[Any, ...], str]]:
    """(relative loc, agent key) of every agent named inside a condition, for load-time checks."""
    out: list[tuple[tuple[Any, ...], str]] = []
    for name in ("inbox_accepted", "turn_ended", "hang_reached", "parked", "step_reached", "settled"):
        part = getattr(cond, name)
        if part is not None:
            out.append(((to_camel(name), "agent"), part.agent))
    for name in ("all", "any"):
        for i, sub in enumerate(getattr(cond, name) or []):
            out.extend(((name, i, *loc), key) for loc, key in condition_agents(sub))
    return out
