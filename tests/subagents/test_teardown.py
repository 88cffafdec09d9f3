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

import logging
from typing import Any

from loader.agent import Agent
from loader.errors import SubagentError
from loader.texts import TEXTS, render
from tree_kit import build, calls, fresh_signal, inserted, reach, spawn, text, texts

from ._manager_kit import on_agent

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
    held.release.set()
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
    [(target, notice)] = [(t, m) for t, m in inserted(middle) if m["source"]["kind"] == "subagent-settled"]
    assert notice["source"]["stopReason"] == "error"
    assert texts(notice) == [render("T-NOTICE-error", id=inner_id), TEXTS["T-NOTICE-NO-OUTPUT"]]
    root_notices = [m for _, m in inserted(root) if m["source"]["kind"] == "subagent-settled"]
    assert [(m["source"]["senderSessionId"], m["source"]["stopReason"]) for m in root_notices] == [
        (middle_id, "completed")
    ]
    prefix = render("T-LOG-TEARDOWN-FAILED", id=inner_id, detail="")
    logged = [r for r in caplog.records if r.getMessage().startswith(prefix)]
    assert [r.levelno for r in logged] == [logging.WARNING] and UNREADABLE in logged[0].getMessage()
    tree.provider.inner.finish_checks()
    assert tree.provider.inner.violations == []
