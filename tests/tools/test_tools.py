"""The model-facing tools (SPEC §12, §8.1; matrix 84–86): visibility per agent shape, the schemas
and system prompt the model is sent, values and rendered texts of results, and argument errors.

Everything is observed where the model would see it: the `ModelRequest`s the provider served and
the `tool/result` events in the calling agent's log.
"""

from __future__ import annotations

from typing import Any

import pytest

from dsh.loader.abort import AbortController
from dsh.loader.agent import Agent, user_message
from dsh.loader.ids import new_child_id
from dsh.loader.session import make_header
from dsh.loader.subagents import UserAuthority, interrupt, list_agents
from dsh.loader.texts import TEXTS, TOOL_DESCRIPTIONS, TOOL_PARAMS, render
from tree_kit import (
    build,
    HANG,
    TreeWatch,
    call,
    calls,
    reach,
    result_text,
    spawn,
    text,
    tool_results,
)

ROOT_TOOLS = ["subagent", "send_message", "list_agents", "interrupt_agent"]
SYSTEM = TEXTS["T-SYSTEM-DEFAULT"]
DELEGATION = TEXTS["T-SYSTEM-DELEGATION"]
REPORTING = TEXTS["T-SYSTEM-REPORTING"]


def names(request: Any) -> list[str]:
    return [t["name"] for t in request.tools]


async def _three_shapes(make_tree: Any) -> tuple[Any, TreeWatch, Agent]:
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa"), spawn("so", run_in_background=False)), text("STARTED"), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [text("child answer")]},
        "once": {"spawnedBy": "so", "replies": [text("one-shot answer")]},
    })
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    return tree, watch, root


@pytest.mark.parametrize(
    ("key", "tools", "sections"),
    [
        pytest.param("root", ROOT_TOOLS, [SYSTEM, DELEGATION], id="root"),
        pytest.param("child", [*ROOT_TOOLS, "report"], [SYSTEM, DELEGATION, REPORTING], id="continuable"),
        pytest.param("once", [], [SYSTEM], id="one-shot"),
    ],
)
async def test_each_agent_shape_sees_its_tools_and_system_sections(make_tree, key, tools, sections):
    """§8.1 visibility and §12.4 sections, as sent to the model in every request of that agent."""
    tree, watch, root = await _three_shapes(make_tree)
    requests = watch.requests_of(key)
    assert requests
    for request in requests:
        assert names(request) == tools
        assert request.system == "\n\n".join(sections)


async def test_tool_schemas_carry_the_spec_descriptions(make_tree):
    """§12.3: each tool's description and its parameter descriptions reach the model verbatim."""
    tree, watch, root = await _three_shapes(make_tree)
    schemas = {t["name"]: t for t in watch.requests_of("child")[0].tools}
    for name, schema in schemas.items():
        assert schema["description"] == TOOL_DESCRIPTIONS[name]
        properties = schema["parameters"]["properties"]
        for param, description in TOOL_PARAMS.get(name, {}).items():
            assert properties[param]["description"] == description
    subagent = schemas["subagent"]["parameters"]
    assert set(subagent["properties"]) == {"prompt", "label", "run_in_background"}
    assert set(subagent["required"]) == {"prompt", "label"}
    assert subagent["additionalProperties"] is False
    assert schemas["send_message"]["parameters"]["required"] == ["agent_id", "message"]
    assert schemas["interrupt_agent"]["parameters"]["required"] == ["agent_id"]
    assert schemas["report"]["parameters"]["required"] == ["output"]
    assert schemas["list_agents"]["parameters"]["properties"]["scope"]["enum"] == ["children", "descendants"]


async def test_subagent_without_run_in_background_starts_a_continuable_child(make_tree):
    """Matrix 84: omitted — value `{kind: continuable, sessionId}` and text T-SPAWN-BG."""
    tree, watch, root = await _three_shapes(make_tree)
    result = tool_results(root)["sa"]
    child_id = watch.id_of("child")
    assert result["value"] == {"kind": "continuable", "sessionId": child_id}
    assert result_text(result) == render("T-SPAWN-BG", id=child_id)
    assert result["message"]["content"][0]["isError"] is False


async def test_a_foreground_subagent_returns_the_childs_output(make_tree):
    """Matrix 84: `false` — value `{kind: foreground, sessionId, stopReason, output}`; the text is
    the child's output."""
    tree, watch, root = await _three_shapes(make_tree)
    result = tool_results(root)["so"]
    assert result["value"] == {
        "kind": "foreground",
        "sessionId": watch.id_of("once"),
        "stopReason": "completed",
        "output": [{"type": "text", "text": "one-shot answer"}],
    }
    assert result_text(result) == "one-shot answer"


async def test_a_foreground_subagent_without_text_output_says_so(make_tree):
    """Matrix 84: empty output — T-SPAWN-FG-EMPTY."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("so", run_in_background=False)), text("DONE")]},
        "once": {"spawnedBy": "so", "replies": [{"reasoning": "thinking only"}]},
    })
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    result = tool_results(root)["so"]
    assert result_text(result) == TEXTS["T-SPAWN-FG-EMPTY"]
    assert result["value"]["stopReason"] == "completed"


async def test_a_foreground_subagent_that_does_not_complete_is_subagent_incomplete(make_tree):
    """Matrix 84: non-completed — `SUBAGENT_INCOMPLETE` with T-ERR-INCOMPLETE and the partial text,
    rendered T-TOOL-ERROR."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("so", run_in_background=False)), text("DONE")]},
        "once": {"spawnedBy": "so", "replies": [{"text": "half an answer", "finish": "max-tokens"}]},
    })
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    result = tool_results(root)["so"]
    message = (
        "the subagent ended with max-tokens instead of completing" + "\nPartial output:\nhalf an answer"
    )
    assert result["error"] == {"code": "SUBAGENT_INCOMPLETE", "message": message}
    assert result_text(result) == f"Tool failed [SUBAGENT_INCOMPLETE]: {message}"
    assert result["message"]["content"][0]["isError"] is True
    assert "value" not in result


async def test_list_agents_reports_each_residency_state_and_omits_one_shot_children(make_tree, home):
    """Matrix 85: running, parked, idle (waiting on its own child), ready (settled); the one-shot
    child is omitted; rows are ordered by `createdAt`, then id."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [
            calls(spawn("s1", label="runs"), spawn("s2", label="parks"), spawn("s3", label="waits"),
                  spawn("s4", label="settles"), spawn("so", label="once", run_in_background=False)),
            text("STARTED"),
            text("NOTED"),
        ]},
        "runs": {"spawnedBy": "s1", "replies": [HANG]},
        "parks": {"spawnedBy": "s2", "replies": []},
        "waits": {"spawnedBy": "s3", "replies": [calls(spawn("g3", label="grand")), text("waiting")]},
        "grand": {"spawnedBy": "g3", "replies": []},
        "settles": {"spawnedBy": "s4", "replies": [text("settled answer")]},
        "once": {"spawnedBy": "so", "replies": [text("one-shot answer")]},
    })
    parks = watch.hold("parks")
    grand = watch.hold("grand")
    settles = watch.hold("settles")
    root.followup(user_message("go"))
    await reach(watch.hang("runs"))
    await reach(parks.reached)
    await reach(grand.reached)
    await reach(watch.idle_after_run("waits"))
    await reach(watch.idle_after_run("root"))
    settles.release()
    await reach(watch.ended("settles"))
    await reach(root.when_idle())  # the notice turn
    parked = watch.agents["parks"]
    await tree.manager.followup(root, parked.id, "B", {"kind": "user"}, AbortController().signal)
    interrupt(tree.manager, parked.id, UserAuthority(root.id))
    await reach(parked.when_idle())

    # Two saved, non-resident children written by hand, with createdAt out of id order.
    early, late = sorted([new_child_id(), new_child_id()], reverse=True)
    for session_id, created_at in ((early, 1_000), (late, 2_000)):
        session = await tree.store.create(make_header(
            session_id, parent_session=root.id, origin="subagent", delegation_depth=1, created_at=created_at,
        ))
        session.append("subagent/descriptor", {"version": 1, "mode": "continuable", "provider": "spawn", "label": "saved"})
        await tree.store.close(session)

    rows = list_agents(tree.manager, tree.catalogue, root.id)
    expected = {
        early: "ready", late: "ready",
        watch.id_of("runs"): "running", watch.id_of("parks"): "parked",
        watch.id_of("waits"): "idle", watch.id_of("settles"): "ready",
    }
    assert {r["id"]: r["status"] for r in rows} == expected
    assert watch.id_of("once") not in [r["id"] for r in rows]
    assert [r["id"] for r in rows][:2] == [early, late]
    # createdAt first; live siblings of one millisecond keep their creation order (the order the
    # watch saw them built), never the order of their random ids.
    headers = {r["id"]: tree.store.read(r["id"]).header for r in rows}
    built = [agent.id for agent in watch.agents.values()]
    assert [r["id"] for r in rows] == sorted(
        headers, key=lambda i: (headers[i]["createdAt"], built.index(i) if i in built else -1, i)
    )
    assert {r["label"] for r in rows} == {"runs", "parks", "waits", "settles", "saved"}

    deep = list_agents(tree.manager, tree.catalogue, root.id, "descendants")
    grand_row = next(r for r in deep if r["id"] == watch.id_of("grand"))
    assert grand_row == {"id": watch.id_of("grand"), "label": "grand", "status": "running",
                         "parent": watch.id_of("waits"), "depth": 2}
    waits_row = next(r for r in deep if r["id"] == watch.id_of("waits"))
    assert (waits_row["parent"], waits_row["depth"]) == (root.id, 1)
    assert [r["id"] for r in deep].index(watch.id_of("grand")) == [r["id"] for r in deep].index(watch.id_of("waits")) + 1


async def test_list_agents_reads_a_live_child_from_memory_while_its_descriptor_is_still_queued(make_tree):
    """A child created a moment ago may not have its descriptor line on disk yet (write-behind,
    §5.4); how far the store's writer got must not change what `list_agents` shows. Here the line
    stays queued (a 5 s batch delay, no flush), which is the slow-writer side of that race."""
    tree, watch, root = await build(make_tree, {"root": {"replies": []}}, batch_delay_ms=5000)
    child_id = new_child_id()
    session = await tree.store.create(make_header(
        child_id, parent_session=root.id, origin="subagent", delegation_depth=1,
    ))
    session.append("subagent/descriptor", {"version": 1, "mode": "continuable", "provider": "spawn", "label": "fresh"})
    tree.catalogue.note_created(child_id)
    assert b"subagent/descriptor" not in tree.store.path(child_id).read_bytes()  # still queued

    rows = list_agents(tree.manager, tree.catalogue, root.id)

    assert rows == [{"id": child_id, "label": "fresh", "status": "ready"}]
    await tree.store.close(session)


async def test_the_list_agents_tool_renders_rows_or_the_empty_text(make_tree):
    """§12.1 `list_agents` render: T-LIST-ROW lines; T-LIST-EMPTY without children."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [
            calls(call("l0", "list_agents")),
            calls(spawn("sa", label="worker")),
            calls(call("l1", "list_agents"), call("l2", "list_agents", scope="descendants")),
            text("DONE"),
        ]},
        "child": {"spawnedBy": "sa", "replies": []},
    })
    watch.hold("child")
    root.followup(user_message("go"))
    await reach(watch.idle_after_run("root"))
    results = tool_results(root)
    child_id = watch.id_of("child")
    assert result_text(results["l0"]) == TEXTS["T-LIST-EMPTY"] and results["l0"]["value"] == []
    assert result_text(results["l1"]) == f"{child_id} | running | worker"
    assert results["l1"]["value"] == [{"id": child_id, "label": "worker", "status": "running"}]
    assert result_text(results["l2"]) == f"{child_id} | running | worker | parent {root.id} | depth 1"


async def test_send_message_and_interrupt_agent_render_their_texts(make_tree):
    """§12.1: `send_message` → `{messageId}` + T-SEND; `interrupt_agent` → `{accepted: true}` +
    T-INTERRUPT, and the child's turn ends `aborted/parent`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [
            calls(spawn("sa")),
            calls(call("sm", "send_message", agent_id="{{child:sa}}", message="B")),
            calls(call("ia", "interrupt_agent", agent_id="{{child:sa}}")),
            text("DONE"),
        ]},
        "child": {"spawnedBy": "sa", "replies": [HANG]},
    })
    root_held = watch.hold("root", turn=1, step=2)
    root.followup(user_message("go"))
    await reach(root_held.reached)
    await reach(watch.hang("child"))
    root_held.release()
    await reach(watch.idle_after_run("root"))
    child = watch.agents["child"]
    results = tool_results(root)
    message_id = results["sm"]["value"]["messageId"]
    assert result_text(results["sm"]) == render("T-SEND", id=child.id, messageId=message_id)
    assert [m["id"] for m in child.inbox.next_turn] == [message_id]
    assert child.inbox.next_turn[0]["source"] == {"kind": "coordinator", "form": "relay", "senderSessionId": root.id}
    assert results["ia"]["value"] == {"accepted": True}
    assert result_text(results["ia"]) == render("T-INTERRUPT", id=child.id)
    assert child.cancels == [({"kind": "parent"}, True)]
    await reach(child.when_idle())
    assert tree.manager.activations[child.id].parked


@pytest.mark.parametrize(
    ("tool_call", "code", "message"),
    [
        pytest.param(call("c", "subagent", label="x"), "INVALID_ARGS", None, id="m86-missing-prompt"),
        pytest.param(call("c", "subagent", prompt="p", label="x", bogus=1), "INVALID_ARGS", None, id="m86-unknown-key"),
        pytest.param(call("c", "subagent", prompt="", label="x"), "INVALID_ARGS", None, id="m86-empty-prompt"),
        pytest.param(call("c", "subagent", prompt="p", label="x" * 81), "INVALID_ARGS", None, id="m86-long-label"),
        pytest.param(call("c", "list_agents", scope="everyone"), "INVALID_ARGS", None, id="m86-bad-scope"),
        pytest.param(call("c", "send_message", agent_id="x", message=""), "INVALID_ARGS", None, id="m86-empty-message"),
        pytest.param({"id": "c", "name": "interrupt_agent", "arguments": "{not json"}, "INVALID_ARGS", None,
                     id="m86-not-json"),
        pytest.param(call("c", "report", output="x"), "UNKNOWN_TOOL", "there is no tool named report",
                     id="m86-report-at-root"),
        pytest.param(call("c", "nope"), "UNKNOWN_TOOL", "there is no tool named nope", id="m86-unknown-tool"),
    ],
)
async def test_bad_calls_become_error_results_rendered_tool_error(make_tree, tool_call, code, message):
    """Matrix 86: `INVALID_ARGS` / `UNKNOWN_TOOL` error results, rendered T-TOOL-ERROR; the turn
    goes on to its next step."""
    tree, watch, root = await build(make_tree, {"root": {"replies": [calls(tool_call), text("DONE")]}})
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    result = tool_results(root)["c"]
    error = result["error"]
    assert error["code"] == code
    if message is None:
        assert error["message"].startswith("arguments rejected: ")
    else:
        assert error["message"] == message
    assert result_text(result) == render("T-TOOL-ERROR", code=code, message=error["message"])
    assert result["message"]["content"][0]["isError"] is True
    assert tree.manager.activations == {} and len(list(tree.store.sessions_dir.iterdir())) == 1
    assert [e["data"]["reason"] for e in root.session.events if e["type"] == "turn/end"] == [{"kind": "completed"}]
