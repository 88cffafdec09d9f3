"""The control methods' params (SPEC §18.2) as pydantic models: strict, camelCase keys only, no
unknown keys. `methods.py` validates a well-formed request with its lean tables and imports this
module only for the rest (issue 13), whose errors become the INVALID_PARAMS answer.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from dsh.loader.host.methods import check_session_id

__all__ = ["InterruptParams", "ListParams", "PromptParams", "StatusParams"]

SessionId = Annotated[str, AfterValidator(check_session_id)]  # the one validator (issue 15 item 4)


class _Params(BaseModel):
    # defer_build: the validators are built on the first request, not at import; most runs serve
    # none, and building these four cost a `dsh run --transcript` ~1.5% of its start-up (issue 13).
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=False, extra="forbid", strict=True, frozen=True,
        defer_build=True,
    )


class InterruptParams(_Params):
    parent_session_id: SessionId
    child_session_id: SessionId
    mode: Literal["continuable"] = "continuable"


class PromptParams(InterruptParams):
    message: Annotated[str, Field(min_length=1)]


class ListParams(_Params):
    parent_session_id: SessionId
    scope: Literal["children", "descendants"] = "children"


class StatusParams(_Params):
    pass
