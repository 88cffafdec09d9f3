"""The four control methods of SPEC §18.2, behind the transport in `server.py`.

Each method validates its params with a pydantic model (`extra="forbid"`, strict, camelCase keys
only; `params.py`), or without pydantic when the lean table `PARAMS` is sure (issue 13), and answers with a plain dict or raises `RpcError`. The manager's typed errors are translated
here and nowhere else (§18.3): `UNAUTHORIZED` → subagent-unauthorized, `NOT_RESUMABLE` →
subagent-not-resumable, `DRAINING` / `ACTIVATION_CLOSING` → subagent-delivery-unavailable; anything
else is left to the server, which answers `internal`.

Invariant (§10.1, matrix 108): `subagent.interrupt` touches only `interrupt(manager, child,
UserAuthority(parent))` — no catalogue, history, store or registry access — so a child stays
stoppable while its parent agent is gone or its files are unreadable.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.errors import SubagentError
from dsh.loader.host.protocol import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    RpcError,
    bad_request,
    delivery_unavailable,
    not_resumable,
    unauthorized,
)
from dsh.loader.ids import session_id_problem
from dsh.loader.lean import REQUIRED, Field, Schema, camel, validate
from dsh.loader.subagents import UserAuthority, interrupt, list_agents, status_of

if TYPE_CHECKING:
    from dsh.loader.agent import Agent
    from dsh.loader.host.params import InterruptParams, ListParams, PromptParams, StatusParams
    from dsh.loader.tree import Tree

__all__ = [
    "InterruptParams",
    "ListParams",
    "Methods",
    "PromptParams",
    "RunState",
    "StatusParams",
]

logger = logging.getLogger(__name__)

RunState = Literal["running", "stalled", "shutting-down"]


def check_session_id(value: str) -> str:
    """The one session-id check of the params (issue 15 item 4), for the lean tables and the models."""
    problem = session_id_problem(value)
    if problem is not None:
        raise ValueError(f"not a session id: {problem}")
    return value


_DESCRIPTOR_SCAN = 4  # the descriptor is written right after the header (§8.2), i.e. at seq 0


def _f(name: str, kind: tuple[Any, ...], default: Any = REQUIRED) -> Field:
    return Field(name, camel(name), kind, default)


# The params as `loader.lean` tables (issue 13): a well-formed request is validated without pydantic,
# which the run then never imports; anything else goes to the pydantic model of the same name in
# `params.py` (strict, camelCase keys only), whose errors are the answer. `tests/test_lean.py` pins
# that the tables and the models agree.
_SESSION_ID = ("str", {"check": check_session_id})
_CHILD = (_f("parent_session_id", _SESSION_ID), _f("child_session_id", _SESSION_ID),
          _f("mode", ("lit", ("continuable",)), "continuable"))
PARAMS: dict[str, Schema] = {
    schema.name: schema
    for schema in (
        Schema("InterruptParams", _CHILD),
        Schema("PromptParams", (*_CHILD, _f("message", ("str", {"min_length": 1})))),
        Schema("ListParams", (_f("parent_session_id", _SESSION_ID),
                              _f("scope", ("lit", ("children", "descendants")), "children"))),
        Schema("StatusParams", ()),
    )
}


@dataclass
class Methods:
    """The method table of one run: `methods.start(name, params)` → the result dict, or for
    `subagent.prompt` (the one method that awaits) a coroutine producing it; errors as RpcError.

    Why two shapes (issue 15 item 8): the server answers the methods that need no await inside the
    socket's read callback, without a task per request; only a delivery has to wait for the child."""

    tree: Tree
    root: Agent
    state: Callable[[], RunState]
    signal: AbortSignal
    started_at: int = field(default_factory=lambda: time.time_ns() // 1_000_000)

    def __post_init__(self) -> None:
        self._table: dict[str, tuple[str, Callable[[Any], dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]]]] = {
            "subagent.interrupt": ("InterruptParams", self._interrupt),
            "subagent.prompt": ("PromptParams", self._prompt),
            "subagent.list": ("ListParams", self._list),
            "run.status": ("StatusParams", self._status),
        }

    def start(self, method: str, params: Any) -> dict[str, Any] | Coroutine[Any, Any, dict[str, Any]]:
        entry = self._table.get(method)
        if entry is None:
            raise bad_request(METHOD_NOT_FOUND, f"unknown method {method!r}", {"method": method})
        model, handler = entry
        return handler(_validate(model, params))

    def _interrupt(self, p: InterruptParams) -> dict[str, Any]:
        # Only the S8 function, nothing before or after it (§18.2): success means "signal issued".
        try:
            interrupt(self.tree.manager, p.child_session_id, UserAuthority(p.parent_session_id))
        except SubagentError as exc:
            _translate(exc, p.child_session_id)
        return {"accepted": True}

    async def _prompt(self, p: PromptParams) -> dict[str, Any]:
        parent = self.tree.registry.get(p.parent_session_id)
        if parent is None:
            raise delivery_unavailable(p.child_session_id, "parent-not-live")
        try:
            message_id = await self.tree.manager.followup(
                parent, p.child_session_id, [{"type": "text", "text": p.message}], {"kind": "user"}, self.signal
            )
        except SubagentError as exc:
            _translate(exc, p.child_session_id)
        except Aborted:
            # The server is closing (its signal aborted); the run is going away, not this child.
            raise delivery_unavailable(p.child_session_id, "closing") from None
        return {"messageId": message_id}

    def _list(self, p: ListParams) -> dict[str, Any]:
        rows = list_agents(self.tree.manager, self.tree.catalogue, p.parent_session_id, p.scope)
        entries: list[dict[str, Any]] = []
        for row in rows:
            if "status" not in row:
                # An unreadable session (no descriptor): the §18.2 entry shape has no place for it.
                logger.debug("subagent.list skips unreadable session %s", row.get("id"))
                continue
            entries.append({
                "sessionId": row["id"],
                "parentSessionId": row.get("parent", p.parent_session_id),
                "depth": row.get("depth", 1),
                "label": row["label"],
                "status": row["status"],
            })
        return {"parentLive": self.tree.registry.get(p.parent_session_id) is not None, "entries": entries}

    def _status(self, p: StatusParams) -> dict[str, Any]:
        manager = self.tree.manager
        agents: list[dict[str, Any]] = []
        for agent in self.tree.registry:
            row: dict[str, Any] = {"sessionId": agent.id}
            parent = agent.header.get("parentSession")
            if parent is not None:
                row["parentSessionId"] = parent
            label = _label_of(agent)
            if label is not None:
                row["label"] = label
            # Continuable children use the §12.2 statuses; the root and one-shot children have no
            # Activation, so their own running/idle is the truthful answer.
            row["status"] = status_of(manager, agent.id) if agent.id in manager.activations else agent.status
            agents.append(row)
        return {
            "rootSessionId": self.root.id,
            "pid": os.getpid(),
            "startedAt": self.started_at,
            "state": self.state(),
            "agents": agents,
        }


def _validate(model: str, params: Any) -> Any:
    """The params as a lean record or a model instance (see `PARAMS`), or the INVALID_PARAMS answer."""
    if params is None:
        if model == "StatusParams":
            return validate(PARAMS[model], {})
        raise bad_request(INVALID_PARAMS, "params: required", {"errors": [{"loc": "params", "problem": "required"}]})
    if not isinstance(params, dict):
        raise bad_request(INVALID_PARAMS, "params: must be an object", {"errors": [{"loc": "params", "problem": "must be an object"}]})
    record = validate(PARAMS[model], params)
    if record is not None:
        return record
    from pydantic import ValidationError

    from dsh.loader.host import params as models

    try:
        return getattr(models, model).model_validate(params)
    except ValidationError as exc:
        # Only location and pydantic's message: never the offending input, which may be large.
        problems = [
            {"loc": ".".join(str(x) for x in e["loc"]) or "params", "problem": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False, include_context=False)
        ]
        detail = "; ".join(f"{e['loc']}: {e['problem']}" for e in problems)
        raise bad_request(INVALID_PARAMS, detail, {"errors": problems}) from None


def _translate(exc: SubagentError, child_session_id: str) -> NoReturn:
    if exc.code == "UNAUTHORIZED":
        raise unauthorized(child_session_id) from exc
    if exc.code == "NOT_RESUMABLE":
        raise not_resumable(child_session_id) from exc
    if exc.code == "DRAINING":
        raise delivery_unavailable(child_session_id, "draining") from exc
    if exc.code == "ACTIVATION_CLOSING":
        raise delivery_unavailable(child_session_id, "closing") from exc
    raise exc  # the server logs it and answers `internal`


def _label_of(agent: Agent) -> str | None:
    # In-memory log only, never the store: the descriptor is one of the first events (§8.2).
    for event in agent.session.events[:_DESCRIPTOR_SCAN]:
        if event["type"] == "subagent/descriptor":
            label = event["data"].get("label")
            return str(label) if label is not None else None
    return None


def __getattr__(name: str) -> object:
    if name in PARAMS:  # the pydantic models, on first use
        from dsh.loader.host import params as models

        return getattr(models, name)
    raise AttributeError(f"module 'dsh.loader.host.methods' has no attribute {name!r}")
