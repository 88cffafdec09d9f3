"""Fence vocabulary (SPEC §16.1) as pydantic models; the runtime lives in `loader.fences`.

Each fence and each condition is a one-key mapping (`hold:`, `inboxAccepted:` …); exactly one key
must be present. Agent names are transcript agent keys (`*children` only in `hold`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from dsh.loader.transcripts.shapes import FenceShape, condition_agents, exactly_one_problem

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
    problem = exactly_one_problem(model, tuple(type(model).model_fields), what)
    if problem is not None:
        raise ValueError(problem)


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


class Fence(_Schema, FenceShape):
    hold: HoldSpec | None = None
    maintenance: MaintenanceSpec | None = None
    fail_checkpoint: FailCheckpointSpec | None = None

    @model_validator(mode="after")
    def _one(self) -> Fence:
        _exactly_one(self, "fence")
        return self
