"""A disposal whose outcome cannot be computed still settles (SPEC §8.11, issue 14).

Step 8 reads the epoch's terminal facts from the child's log. If that read fails, the failure joins
step 10 like any other teardown failure: the Activation is still removed, a notice with stopReason
`error` still reaches the parent, ownership is still released (span S6, in that order), the
lifecycle edge says `error`, and the disposal resolves with ACTIVATION_TEARDOWN_FAILED naming the
failure. Otherwise the Activation would stay in the map and its ancestors would read `waiting`
forever.

The seam is the child session's event list: it refuses to be sliced, which is exactly how teardown
reads the epoch (`events[boundary:]`); appends and iteration work as usual, and nothing else in the
runtime slices a child's log.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from dsh.loader.agent import Agent
from dsh.loader.errors import SubagentError
from dsh.loader.subagents import drain_children, drain_descendants
from dsh.loader.texts import TEXTS, render
from tree_kit import (
    TreeWatch,
    build,
    calls,
    failing_release,
    fresh_signal,
    inserts,
    on_agent,
    reach,
    spawn,
    text,
    texts,
)


UNREADABLE = "event log unreadable"


class UnsliceableEvents(list):  # type: ignore[type-arg]
    """The session's event list, except that reading a slice of it raises."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            raise LookupError(UNREADABLE)
        return super().__getitem__(key)


async def test_a_failure_computing_the_outcome_still_removes_notifies_and_releases(make_tree, caplog):
    """root → middle → inner; inner answers, then its teardown cannot read its epoch. At the moment
    inner's notice is inserted into middle, inner's Activation is already gone and middle still owns
    it (§8.11 steps 11–13); the notice says `error` with no output; middle is released, so it settles
    in turn and root hears of it; the disposal fails with ACTIVATION_TEARDOWN_FAILED naming the
    failure, and T-LOG-TEARDOWN-FAILED is logged once.
    Broken by: moving step 8 back outside the `try` in teardown.py (the test then times out with
    inner's Activation still in the map and middle `waiting`)."""
    caplog.set_level(logging.WARNING)
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED")]},
        "middle": {"order": 1, "replies": [calls(spawn("si")), text("WAITING"), text("SAW_IT")]},
        "inner": {"spawnedBy": "si", "replies": [text("INNER_DONE")]},
    })

    def choke(agent: Agent) -> None:
        agent.session.events = UnsliceableEvents(agent.session.events)

    on_agent(tree, "inner", choke)
    at_insert: list[tuple[bool, bool]] = []

    def watch_middle(agent: Agent) -> None:
        def on_inserted(payload: dict[str, Any]) -> None:
            if payload["message"]["source"]["kind"] == "subagent-settled":
                owner = tree.manager.activations[agent.id]
                inner_id = payload["message"]["source"]["senderSessionId"]
                at_insert.append((inner_id in tree.manager.activations, inner_id in owner.owned_children))

        agent.events.on("agent/inbox/inserted", on_inserted)

    on_agent(tree, "middle", watch_middle)
    held = watch.hold("inner")
    middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
    await reach(held.reached)
    inner_id = watch.id_of("inner")
    activation = tree.manager.activations[inner_id]
    held.release()
    await reach(watch.ended("inner"))

    assert activation.disposal is not None and activation.disposal.done()
    failure = activation.disposal.exception()
    assert isinstance(failure, SubagentError) and failure.code == "ACTIVATION_TEARDOWN_FAILED"
    assert UNREADABLE in failure.message
    assert at_insert == [(False, True)]  # removed, then notified while still owned
    assert inner_id not in tree.manager.activations
    assert inner_id not in tree.manager.activations[middle_id].owned_children  # released
    [edge] = [e for e in watch.ends if e["sessionId"] == inner_id]
    assert edge["stopReason"] == "error" and "output" not in edge

    await reach(tree.wait_quiet(root))
    middle = watch.agents["middle"]
    [(target, notice)] = [(t, m) for t, m in inserts(middle) if m["source"]["kind"] == "subagent-settled"]
    assert notice["source"]["stopReason"] == "error"
    failed = render("T-ERR-TEARDOWN", id=inner_id, detail="event log unreadable")
    assert texts(notice) == [
        render("T-NOTICE-error-detail", id=inner_id, code="ACTIVATION_TEARDOWN_FAILED", message=failed),
        TEXTS["T-NOTICE-NO-OUTPUT"],
    ]
    root_notices = [m for _, m in inserts(root) if m["source"]["kind"] == "subagent-settled"]
    assert [(m["source"]["senderSessionId"], m["source"]["stopReason"]) for m in root_notices] == [
        (middle_id, "completed")
    ]
    prefix = render("T-LOG-TEARDOWN-FAILED", id=inner_id, detail="")
    logged = [r for r in caplog.records if r.getMessage().startswith(prefix)]
    assert [r.levelno for r in logged] == [logging.WARNING] and UNREADABLE in logged[0].getMessage()
    tree.provider.inner.finish_checks()
    assert tree.provider.inner.violations == []


# -- failing children, aggregated (mutation survivors of the first run) ----------------------------


@pytest.mark.parametrize("drain", ["selected-children", "the-owner", "scoped"])
async def test_every_failing_child_is_waited_for_and_named_once_in_the_failure(make_tree, drain):
    """§8.11 steps 5 and 10, §8.12: middle owns i1 and i2, whose handle disposals both fail. Whether
    the drain selects the two children (after an id with no Activation), their owner, or the whole
    scope below the root, it waits for both, leaves no Activation behind and raises one
    ACTIVATION_TEARDOWN_FAILED naming both failures, "; "-joined (the scoped drain names them twice:
    once per child target and once inside middle's own failure). When the owner is drained its own
    notice says `error`; in the scoped drain the closing root still receives it (injected)."""
    broken: set[str] = set()

    tree = await make_tree({
        "root": {"replies": []},
        "middle": {"order": 1, "replies": [calls(spawn("s1"), spawn("s2")), text("WAITING")]},
        "i1": {"spawnedBy": "s1", "replies": []},
        "i2": {"spawnedBy": "s2", "replies": []},
    }, agent_class=failing_release(broken))
    watch = TreeWatch(tree)
    root = await tree.create_root()
    holds = [watch.hold("i1"), watch.hold("i2")]
    middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
    for held in holds:
        await reach(held.reached)
    await reach(watch.idle_after_run("middle"))
    i1, i2 = watch.id_of("i1"), watch.id_of("i2")
    broken.update({i1, i2})
    middle = watch.agents["middle"]
    a1, a2 = tree.manager.activations[i1], tree.manager.activations[i2]

    with pytest.raises(SubagentError) as info:
        if drain == "selected-children":
            await reach(drain_children(tree.manager, middle, ["0" * 32, i1, i2]))
        elif drain == "the-owner":
            await reach(drain_children(tree.manager, root, [middle_id]))
        else:
            await reach(drain_descendants(tree.manager, [root]))

    failure = info.value
    assert failure.code == "ACTIVATION_TEARDOWN_FAILED"
    first, second = f"handle of {i1} broke", f"handle of {i2} broke"
    # The scoped drain aggregates every target: each child's own failure, and middle's, which names both.
    times = 2 if drain == "scoped" else 1
    assert failure.message.count(first) == times and failure.message.count(second) == times
    at = sorted((failure.message.index(first), failure.message.index(second)))
    assert "; " in failure.message[at[0]:at[1]]
    assert a1.disposal is not None and a2.disposal is not None
    own = {a.child_id: str(a.disposal.exception()) for a in (a1, a2)}
    assert own[i1] == render("T-ERR-TEARDOWN", id=i1, detail=first)
    if drain == "selected-children":  # aggregated in the order of the ids given
        assert failure.message == f"{own[i1]}; {own[i2]}"
    elif drain == "the-owner":  # middle's own failure joins its children's, child-first (sorted ids)
        assert failure.message == render("T-ERR-TEARDOWN", id=middle_id,
                                         detail="; ".join(own[c] for c in sorted(own)))
    assert i1 not in tree.manager.activations and i2 not in tree.manager.activations
    ends = {e["sessionId"]: e["stopReason"] for e in watch.ends}
    assert ends[i1] == ends[i2] == "error"
    if drain != "selected-children":
        assert tree.manager.activations == {}
        assert ends[middle_id] == "error"
        [(_, notice)] = [(t, m) for t, m in inserts(root) if m["source"]["kind"] == "subagent-settled"]
        assert notice["source"]["senderSessionId"] == middle_id and notice["source"]["stopReason"] == "error"


# -- the end edge ------------------------------------------------------------------------------------


async def test_the_end_edge_carries_the_epoch_facts_and_the_output(make_tree):
    """§8.11 step 14: `subagent/end {sessionId, parentSessionId, epoch, stopReason, output}`, with
    the epoch's last non-empty assistant content as `output`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED")]},
        "child": {"order": 1, "replies": [text("the answer")]},
    })
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(tree.wait_quiet(root))
    assert watch.ends == [{
        "sessionId": child_id, "parentSessionId": root.id, "epoch": 1, "stopReason": "completed",
        "output": [{"type": "text", "text": "the answer"}],
    }]


# -- a crashed transaction ---------------------------------------------------------------------------


async def test_a_crashed_transaction_still_resolves_its_disposal_with_the_crash(make_tree, caplog, monkeypatch):
    """§8.11, `_settle_on_crash`: drains and followups await the disposal future, so a transaction
    that crashes (here the manager's `release_ownership`, a dependency of teardown, raises; nothing
    in the runtime does) must still resolve it, with the crash itself, logged at ERROR."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED")]},
        "child": {"order": 1, "replies": [text("DONE")]},
    })
    held = watch.hold("child")
    child_id, _ = await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())
    await reach(held.reached)
    activation = tree.manager.activations[child_id]
    crash = RuntimeError("ownership table broke")

    def broken_release(cid: str) -> None:
        raise crash

    opened = asyncio.Event()
    tree.manager.events.on("changed", lambda _p: activation.disposal is not None and opened.set())
    monkeypatch.setattr(tree.manager, "release_ownership", broken_release)
    with caplog.at_level(logging.ERROR, logger="dsh.loader.subagents.teardown"):
        held.release()
        await reach(opened)
        assert activation.disposal is not None
        await reach(asyncio.wait({activation.disposal}))
    monkeypatch.undo()

    assert activation.disposal.exception() is crash
    crashed = [r for r in caplog.records if r.getMessage() == "the disposal transaction crashed"]
    assert len(crashed) == 1 and crashed[0].exc_info is not None and crashed[0].exc_info[1] is crash
    await reach(tree.wait_quiet(root))
