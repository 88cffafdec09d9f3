"""Each tool's parameters as the agent sees them (`Tool.parameters`), without pydantic (issue 13).

`Parameters.model_validate` validates with the `loader.lean` table when it is sure and otherwise with
the pydantic model in `args.py` (imported then), which raises pydantic's `ValidationError` with its
own messages; `model_json_schema` is built from the table and equals the model's. Tests derive the
tables from the models and compare both answers on generated arguments (`tests/test_lean.py`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dsh.loader.lean import REQUIRED, Field, Schema, validate
from dsh.loader.texts import TOOL_PARAMS

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

__all__ = ["AGENT_ID", "LIST_AGENTS", "PARAMETERS", "Parameters", "REPORT", "SEND_MESSAGE", "SUBAGENT"]


class Parameters:
    """One tool's arguments: the lean table, the pydantic model's name in `args.py`, and the
    description of each documented argument (the model's `Field(description=…)`)."""

    def __init__(self, schema: Schema, descriptions: dict[str, str] | None = None) -> None:
        self.schema = schema
        self.descriptions = descriptions or {}

    @property
    def model(self) -> type[BaseModel]:
        """The pydantic model (imports pydantic)."""
        from dsh.loader.tools import args

        model: type[BaseModel] = getattr(args, self.schema.name)
        return model

    @property
    def model_fields(self) -> dict[str, FieldInfo]:
        return self.model.model_fields

    def model_validate(self, raw: Any) -> Any:
        """The arguments as a record (lean) or a model instance; pydantic's `ValidationError` when
        they are invalid."""
        record = validate(self.schema, raw)
        return record if record is not None else self.model.model_validate(raw)

    def model_json_schema(self) -> dict[str, Any]:
        """What pydantic's `model_json_schema()` gives for the model (pinned by a test)."""
        properties = {f.name: self._property(f) for f in self.schema.fields}
        out: dict[str, Any] = {"additionalProperties": False, "properties": properties}
        required = [f.name for f in self.schema.fields if f.default is REQUIRED]
        if required:
            out["required"] = required
        out.update(title=self.schema.name, type="object")
        return out

    def _property(self, f: Field) -> dict[str, Any]:
        tag, *rest = f.type
        out: dict[str, Any] = {}
        if f.default is not REQUIRED:
            out["default"] = f.default
        if f.name in self.descriptions:
            out["description"] = self.descriptions[f.name]
        if tag == "lit":
            out["enum"] = list(rest[0])
        constraints = rest[0] if tag == "str" else {}
        if "max_length" in constraints:
            out["maxLength"] = constraints["max_length"]
        if "min_length" in constraints:
            out["minLength"] = constraints["min_length"]
        out["title"] = f.name.replace("_", " ").title()
        out["type"] = {"str": "string", "bool": "boolean", "lit": "string"}[tag]
        return out


def _f(name: str, kind: tuple[Any, ...], default: Any = REQUIRED) -> Field:
    return Field(name, name, kind, default)  # no alias generator: arguments are snake_case


_NON_EMPTY = ("str", {"min_length": 1})

SUBAGENT = Parameters(Schema("SubagentArgs", (
    _f("prompt", _NON_EMPTY),
    _f("label", ("str", {"min_length": 1, "max_length": 80})),
    _f("run_in_background", ("bool",), True),
)), TOOL_PARAMS["subagent"])
SEND_MESSAGE = Parameters(Schema("SendMessageArgs", (_f("agent_id", ("str", {})), _f("message", _NON_EMPTY))))
LIST_AGENTS = Parameters(
    Schema("ListAgentsArgs", (_f("scope", ("lit", ("children", "descendants")), "children"),)), TOOL_PARAMS["list_agents"]
)
AGENT_ID = Parameters(Schema("AgentIdArgs", (_f("agent_id", ("str", {})),)))
REPORT = Parameters(Schema("ReportArgs", (_f("output", _NON_EMPTY),)), TOOL_PARAMS["report"])

PARAMETERS: dict[str, Parameters] = {
    "subagent": SUBAGENT,
    "send_message": SEND_MESSAGE,
    "list_agents": LIST_AGENTS,
    "interrupt_agent": AGENT_ID,
    "report": REPORT,
}
"""Tool name -> its parameters (`TOOL_PARAMETERS` of `loader.tools`)."""
