"""Inbox.clear keeps settlement notices (issue 9 item 4): a cancel or a disposal discards pending work
but leaves every `subagent-settled` notice pending, so the agent's next residency still reads it."""

from __future__ import annotations

from dsh.loader.agent import Inbox, user_message
from dsh.loader.session import Session, make_header


def _notice(n: int) -> dict:
    return user_message(f"N{n}", {"kind": "subagent-settled", "form": "notice", "summary": "s",
                                  "senderSessionId": f"c{n}", "stopReason": "completed"})


def test_clear_discards_runs_of_other_work_around_kept_notices_in_fifo_order() -> None:
    session = Session(make_header("session-1", created_at=1))
    inbox = Inbox(session)
    discarded: list[str] = []
    inbox.on("agent/inbox/discarded", lambda p: discarded.append(p["message"]["content"][0]["text"]))
    for m in (user_message("A"), _notice(1), user_message("B"), user_message("C"), _notice(2)):
        inbox.append("next-turn", m)
    inbox.append("next-step", user_message("S"))

    inbox.clear()

    assert [m["content"][0]["text"] for m in inbox.next_turn] == ["N1", "N2"]
    assert inbox.next_step == []
    assert discarded == ["S", "A", "B", "C"]
    removals = [(e["data"]["target"], e["data"]["start"], e["data"]["removedCount"])
                for e in session.events if e["data"].get("outcome") == "canceled"]
    assert removals == [("next-step", 0, 1), ("next-turn", 0, 1), ("next-turn", 1, 2)]
    assert Inbox(Session(session.header, session.events)).lists == inbox.lists  # the log agrees
