"""The §18.2 methods against a live tree (matrix 108, 109, 112) and the §18.3 error mapping.

The run is real: a root whose background child hangs in its first model call (see conftest). The
blocking client runs in a worker thread so the loop keeps serving; facts are awaited, never slept on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.errors import SubagentError
from dsh.loader.host import ControlServer, RpcError, call_sync, parse_address, route
from dsh.loader.host import methods as methods_module
from dsh.loader.host.methods import _translate

from .conftest import SPAWN

# -- spies for matrix 108 ------------------------------------------------------------------------

_DUNDERS = ("__contains__", "__iter__", "__len__", "__getitem__")


class CallLog:
    """Counts calls into spied objects made while a control method runs: a frame of
    `dsh/loader/host/methods.py` is on the stack. The methods that need no await run inside the
    transport's read callback, outside any task, so the frame, not a task name, tells the handler's
    calls from the child's own reaction to the cancel (its driver writing turn/end)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def spy(self, obj: Any, label: str) -> None:
        cls = type(obj)
        overrides: dict[str, Any] = {}
        for name in dir(cls):
            if name.startswith("_") and name not in _DUNDERS:
                continue
            attr = getattr(cls, name, None)
            if not callable(attr) or isinstance(attr, type):
                continue
            overrides[name] = self._wrap(attr, f"{label}.{name}")
        obj.__class__ = type(f"Spied{cls.__name__}", (cls,), overrides)

    def _wrap(self, fn: Callable[..., Any], label: str) -> Callable[..., Any]:
        log = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            frame = sys._getframe(1)
            while frame is not None:
                if frame.f_code.co_filename == methods_module.__file__:
                    log.calls.append(label)
                    break
                frame = frame.f_back
            return fn(*args, **kwargs)

        return wrapper


@pytest.fixture
def call_log() -> Iterator[CallLog]:
    yield CallLog()


async def rpc(home: Path, root_id: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    return await asyncio.to_thread(call_sync, home, root_id, method, params)


async def rpc_error(home: Path, root_id: str, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as info:
        await rpc(home, root_id, method, params)
    return info.value


# -- subagent.interrupt ----------------------------------------------------------------------------


async def test_interrupt_reads_no_store_catalogue_or_registry(start_run, home: Path, call_log: CallLog) -> None:
    """Matrix 108: with store, catalogue and registry accessors spied, `subagent.interrupt` of a
    running child calls none of them; the child's turn still ends aborted by the user."""
    run = await start_run()
    call_log.spy(run.tree.store, "store")
    call_log.spy(run.tree.catalogue, "catalogue")
    call_log.spy(run.tree.registry, "registry")
    # The spy sees the handlers' calls: prove it with a method that does read the registry.
    await rpc(home, run.root.id, "run.status", {})
    assert "registry.__iter__" in call_log.calls
    # Taken before the interrupt: once its turn ends the child settles, and on a slow machine its
    # Activation may be gone before the RPC's thread returns.
    child = run.child
    call_log.calls.clear()
    child = run.child  # before the call: once interrupted, the child may settle and leave the map

    result = await rpc(home, run.root.id, "subagent.interrupt",
                       {"parentSessionId": run.root.id, "childSessionId": run.child_id, "mode": "continuable"})

    assert result == {"accepted": True}
    assert call_log.calls == []
    await asyncio.wait_for(child.when_idle(), 5)
    ends = [e["data"]["reason"] for e in child.session.events if e["type"] == "turn/end"]
    assert ends == [{"kind": "aborted", "reason": {"kind": "user"}}]


async def test_interrupt_of_an_absent_child_is_an_accepted_no_op(start_run, home: Path) -> None:
    run = await start_run()
    result = await rpc(home, run.root.id, "subagent.interrupt",
                       {"parentSessionId": "nobody", "childSessionId": str(uuid.uuid4())})
    assert result == {"accepted": True}
    assert run.child.status == "running"


async def test_interrupt_of_a_live_child_under_another_parent_is_unauthorized(start_run, home: Path) -> None:
    """Matrix 109: a live child addressed under the wrong parent → subagent-unauthorized with
    `{childSessionId}`; the child is untouched."""
    run = await start_run()
    error = await rpc_error(home, run.root.id, "subagent.interrupt",
                            {"parentSessionId": "session-someone-else", "childSessionId": run.child_id})
    assert (error.code, error.data_code) == (-32001, "subagent-unauthorized")
    assert error.message == "that child is not registered under the given parent"
    assert error.details == {"childSessionId": run.child_id}
    assert run.child.status == "running"


async def test_handler_failure_is_internal_without_exception_text(start_run, connect, caplog) -> None:
    """Matrix 109: a handler raising → `internal`, the fixed message, empty details; the exception
    text stays in the local log."""
    run = await start_run()
    secret = "boom-7d1e secret detail"

    def broken_state() -> str:
        raise RuntimeError(secret)

    server = ControlServer(run.tree, run.root, state=broken_state)  # type: ignore[arg-type]
    await run.server.close()
    await server.start()
    try:
        conn = await connect(server.path)
        with caplog.at_level(logging.ERROR, logger="dsh.loader.host.server"):
            raw, response = await conn.exchange(b'{"jsonrpc":"2.0","id":1,"method":"run.status"}')
        assert response["error"] == {
            "code": -32603,
            "message": "the request failed inside dsh",
            "data": {"code": "internal", "details": {}},
        }
        assert secret.encode() not in raw and b"RuntimeError" not in raw
        assert any(r.exc_info and secret in str(r.exc_info[1]) for r in caplog.records)
        # The connection survives its handler's failure.
        _raw, again = await conn.exchange(b'{"jsonrpc":"2.0","id":2,"method":"subagent.list",'
                                          b'"params":{"parentSessionId":"x"}}')
        assert again["result"] == {"parentLive": False, "entries": []}
    finally:
        await server.close()


# -- subagent.prompt -------------------------------------------------------------------------------

GRANDCHILD_TREE = {
    "root": {"replies": [SPAWN, {"text": "STARTED"}]},
    "child": {
        "spawnedBy": "sa",
        "replies": [
            {"toolCalls": [{"id": "sb", "name": "subagent", "arguments": {"label": "g", "prompt": "dig"}}]},
            {"text": "DELEGATED"},
        ],
    },
    "grandchild": {"spawnedBy": "sb", "replies": [{"hang": {}}]},
}


async def test_grandchild_address_routes_to_the_root_and_prompt_reaches_it(start_run, home: Path) -> None:
    """Matrix 112: `<child>/<grandchild>` is routed by walking headers to the root's socket, and
    `subagent.prompt` (what `dsh send` calls) lands in the live grandchild's inbox."""
    run = await start_run(GRANDCHILD_TREE, key="grandchild")
    (grandchild,) = [a for a in run.tree.manager.activations.values() if a.parent_session == run.child_id]
    parent, child = parse_address(f"{run.child_id}/{grandchild.child_id}")

    root_id = await asyncio.to_thread(route, home, parent, child)
    assert root_id == run.root.id

    result = await rpc(home, root_id, "subagent.prompt",
                       {"parentSessionId": parent, "childSessionId": child, "message": "one more thing"})
    message_id = result["messageId"]
    inserted = [e for e in grandchild.agent.session.events if e["type"] == "agent/inbox/spliced"
                and message_id in json.dumps(e["data"])]
    assert len(inserted) == 1
    assert "one more thing" in json.dumps(inserted[0]["data"])
    assert message_id in grandchild.accepted


async def test_prompt_to_a_child_without_a_session_is_not_resumable(start_run, home: Path) -> None:
    """Matrix 112: the manager's NOT_RESUMABLE maps to subagent-not-resumable."""
    run = await start_run()
    missing = str(uuid.uuid4())
    error = await rpc_error(home, run.root.id, "subagent.prompt",
                            {"parentSessionId": run.root.id, "childSessionId": missing, "message": "hi"})
    assert (error.code, error.data_code) == (-32002, "subagent-not-resumable")
    assert error.message == "no resumable conversation exists for that child"
    assert error.details == {"childSessionId": missing}


async def test_prompt_with_a_parent_that_is_not_live_is_delivery_unavailable(start_run, home: Path) -> None:
    run = await start_run()
    error = await rpc_error(home, run.root.id, "subagent.prompt",
                            {"parentSessionId": "session-gone", "childSessionId": run.child_id, "message": "hi"})
    assert (error.code, error.data_code) == (-32003, "subagent-delivery-unavailable")
    assert error.message == "the message cannot be delivered right now"
    assert error.details == {"childSessionId": run.child_id, "reason": "parent-not-live"}


async def test_prompt_from_a_live_agent_that_is_not_the_parent_is_unauthorized(start_run, home: Path) -> None:
    run = await start_run()
    error = await rpc_error(home, run.root.id, "subagent.prompt",
                            {"parentSessionId": run.child_id, "childSessionId": run.child_id, "message": "hi"})
    assert (error.code, error.details) == (-32001, {"childSessionId": run.child_id})


async def test_prompt_while_the_manager_drains_is_delivery_unavailable(start_run, home: Path) -> None:
    run = await start_run()
    run.tree.manager.start_draining()  # what a whole-manager drain does first (§8.12)
    error = await rpc_error(home, run.root.id, "subagent.prompt",
                            {"parentSessionId": run.root.id, "childSessionId": run.child_id, "message": "hi"})
    assert error.details == {"childSessionId": run.child_id, "reason": "draining"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param("UNAUTHORIZED", (-32001, "subagent-unauthorized", {"childSessionId": "c"}), id="unauthorized"),
        pytest.param("NOT_RESUMABLE", (-32002, "subagent-not-resumable", {"childSessionId": "c"}), id="not-resumable"),
        pytest.param("DRAINING", (-32003, "subagent-delivery-unavailable",
                                  {"childSessionId": "c", "reason": "draining"}), id="draining"),
        pytest.param("ACTIVATION_CLOSING", (-32003, "subagent-delivery-unavailable",
                                            {"childSessionId": "c", "reason": "closing"}), id="closing"),
    ],
)
def test_manager_error_codes_map_to_the_section_18_3_table(code: str, expected: tuple[Any, ...]) -> None:
    with pytest.raises(RpcError) as info:
        _translate(SubagentError(code, "text that must not travel"), "c")
    assert (info.value.code, info.value.data_code, info.value.details) == expected
    assert "must not travel" not in json.dumps(info.value.to_wire())


def test_other_manager_error_codes_are_left_for_internal() -> None:
    with pytest.raises(SubagentError):
        _translate(SubagentError("DEPTH_EXCEEDED", "x"), "c")


# -- subagent.list and run.status ------------------------------------------------------------------


async def test_list_children_and_descendants(start_run, home: Path) -> None:
    run = await start_run(GRANDCHILD_TREE, key="grandchild")
    (grandchild,) = [a.child_id for a in run.tree.manager.activations.values() if a.parent_session == run.child_id]
    await asyncio.wait_for(asyncio.gather(run.root.when_idle(), run.child.when_idle()), 5)
    children = await rpc(home, run.root.id, "subagent.list", {"parentSessionId": run.root.id})
    assert children == {
        "parentLive": True,
        "entries": [{"sessionId": run.child_id, "parentSessionId": run.root.id, "depth": 1,
                     "label": "c", "status": "idle"}],
    }
    descendants = await rpc(home, run.root.id, "subagent.list",
                            {"parentSessionId": run.root.id, "scope": "descendants"})
    assert descendants["entries"] == [
        {"sessionId": run.child_id, "parentSessionId": run.root.id, "depth": 1, "label": "c", "status": "idle"},
        {"sessionId": grandchild, "parentSessionId": run.child_id, "depth": 2, "label": "g", "status": "running"},
    ]


async def test_run_status_lists_every_registered_agent(start_run, home: Path) -> None:
    run = await start_run()
    await asyncio.wait_for(run.root.when_idle(), 5)  # STARTED ends the root's turn
    run.state[0] = "stalled"
    status = await rpc(home, run.root.id, "run.status", {})
    assert status["rootSessionId"] == run.root.id
    assert status["state"] == "stalled"
    assert isinstance(status["pid"], int) and isinstance(status["startedAt"], int)
    assert status["agents"] == [
        {"sessionId": run.root.id, "status": "idle"},
        {"sessionId": run.child_id, "parentSessionId": run.root.id, "label": "c", "status": "running"},
    ]


async def test_run_status_accepts_omitted_params(start_run, connect) -> None:
    run = await start_run()
    conn = await connect(run.server.path)
    response = await conn.request("run.status")
    assert response["result"]["rootSessionId"] == run.root.id


async def test_interrupted_child_with_queued_prompt_lists_as_parked(start_run, home: Path) -> None:
    """A prompt queued behind a hanging turn, then an interrupt: the child parks (§10.3) and both
    `subagent.list` and `run.status` say so."""
    run = await start_run({
        "root": {"replies": [SPAWN, {"text": "STARTED"}]},
        "child": {"spawnedBy": "sa", "replies": [{"hang": {}}]},
    })
    address = {"parentSessionId": run.root.id, "childSessionId": run.child_id}
    await rpc(home, run.root.id, "subagent.prompt", {**address, "message": "queued"})
    await rpc(home, run.root.id, "subagent.interrupt", address)
    await asyncio.wait_for(run.child.when_idle(), 5)
    listing = await rpc(home, run.root.id, "subagent.list", {"parentSessionId": run.root.id})
    assert [e["status"] for e in listing["entries"]] == ["parked"]
    status = await rpc(home, run.root.id, "run.status", {})
    assert {a["sessionId"]: a["status"] for a in status["agents"]}[run.child_id] == "parked"

