"""A background child settles and its notice opens a new root turn (SPEC §9.4 idle row, matrix 61)."""

from __future__ import annotations

from dsh.loader.agent import user_message


async def test_idle_root_gets_one_notice_turn_from_a_settled_child(make_tree):
    tree = await make_tree(
        {
            "root": {
                "replies": [
                    {"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "c", "prompt": "do it"}}]},
                    {"text": "STARTED"},
                    {"text": "NOTED"},
                ]
            },
            "child": {"spawnedBy": "sa", "replies": [{"text": "the answer"}]},
        }
    )
    root = await tree.create_root()
    settled: list[dict] = []
    tree.manager.events.on("subagent/end", settled.append)
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    notices = [
        e["data"] for e in root.session.events
        if e["type"] == "user/message" and e["data"]["source"]["kind"] == "subagent-settled"
    ]
    assert len(notices) == 1
    source = notices[0]["source"]
    assert source["stopReason"] == "completed"
    assert [b["text"] for b in notices[0]["content"]][1:] == ["Most recent output from the subagent:", "the answer"]
    assert len(settled) == 1 and settled[0]["stopReason"] == "completed"
    assert tree.manager.activations == {}


async def test_cold_resume_keeps_the_run_from_reading_done_while_it_reads_the_header(make_tree):
    """S11 must not read DONE while a delivery is cold-resuming a settled child (e.g. `dsh send`)."""
    from dsh.loader.abort import AbortController

    tree = await make_tree(
        {
            "root": {
                "replies": [
                    {"toolCalls": [{"id": "sa", "name": "subagent", "arguments": {"label": "c", "prompt": "one"}}]},
                    {"text": "STARTED"},
                    {"text": "NOTED"},
                    {"text": "NOTED AGAIN"},
                ]
            },
            "child": {"spawnedBy": "sa", "replies": [{"text": "first"}, {"text": "second"}]},
        }
    )
    root = await tree.create_root()
    root.followup(user_message("go"))
    await tree.wait_quiet(root)
    child_id = tree.provider.inner.session_of("child")
    assert tree.quiescence(root) == "DONE"
    seen: list[str] = []
    real_read = tree.store.read

    def spying_read(session_id: str):
        seen.append(tree.quiescence(root))
        return real_read(session_id)

    tree.store.read = spying_read  # the store is the seam the cold resume reads through
    await tree.manager.followup(root, child_id, "again", {"kind": "user"}, AbortController().signal)
    assert seen == ["RUNNING"]
    await tree.wait_quiet(root)
    assert tree.manager.counters.epochs[child_id] == 2
