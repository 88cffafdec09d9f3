"""Replay binding of concurrent siblings (SPEC §15.3, matrix 87).

Two children started by one root reply bind to their scripts by the spawning call id stored in the
descriptor, never by who asks the model first. Over 20 runs, holds alternate which sibling sends
the first request; every run must serve each child its own script.
"""

from __future__ import annotations

import pytest

from dsh.loader.agent import user_message
from tree_kit import TreeWatch, calls, reach, spawn, text, turn_ends, events_of

RUNS = 20


def _assistant_texts(agent) -> list[str]:
    return [
        b["text"]
        for m in events_of(agent, "assistant/message")
        for b in m["message"]["content"]
        if b["type"] == "text"
    ]


@pytest.mark.parametrize("run", [pytest.param(n, id=f"m87-run{n:02d}") for n in range(RUNS)])
async def test_concurrent_siblings_bind_by_spawning_call_whichever_requests_first(make_tree, run):
    """Matrix 87: `alpha` (spawned by `sa`) and `beta` (spawned by `sb`) each get their own replies,
    whether alpha or beta requests first."""
    tree = await make_tree({
        "root": {"replies": [calls(spawn("sa", label="a"), spawn("sb", label="b")), text("STARTED"),
                             text("N1"), text("N2")]},
        "alpha": {"spawnedBy": "sa", "replies": [text("ALPHA ANSWER")]},
        "beta": {"spawnedBy": "sb", "replies": [text("BETA ANSWER")]},
    })
    watch = TreeWatch(tree)
    first, second = ("beta", "alpha") if run % 2 == 0 else ("alpha", "beta")
    hold_first = watch.hold(first)
    hold_second = watch.hold(second)
    root = await tree.create_root()
    root.followup(user_message("go"))
    await reach(hold_first.reached)
    await reach(hold_second.reached)
    await reach(watch.idle_after_run("root"))

    hold_first.release()
    await reach(watch.idle_after_run(first))
    hold_second.release()
    await tree.wait_quiet(root)

    child_requests = [r.session_id for r in tree.provider.requests if r.session_id != root.id]
    assert child_requests == [watch.id_of(first), watch.id_of(second)]
    for key, call_id, answer in (("alpha", "sa", "ALPHA ANSWER"), ("beta", "sb", "BETA ANSWER")):
        agent = watch.agents[key]
        [descriptor] = events_of(agent, "subagent/descriptor")
        assert descriptor["spawnCallId"] == call_id
        assert _assistant_texts(agent) == [answer]
        assert turn_ends(agent) == [{"kind": "completed"}]
    assert tree.provider.inner.violations == []
    assert tree.provider.inner.finish_checks() == []
