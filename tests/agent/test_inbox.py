"""The inbox's refusals (SPEC §6.5): typed codes for callers, wording from `loader.texts`.

Each refusal happens before anything is logged, so the log never holds a splice it later refuses;
a corrupt splice met while rebuilding from the log is a `SESSION_CORRUPT` load error.
"""

from __future__ import annotations

import pytest

from dsh.loader.agent import Inbox, user_message
from dsh.loader.errors import InboxError, SessionError
from dsh.loader.session import Session
from dsh.loader.texts import RUNTIME_TEXTS, TEXTS, render


def session() -> Session:
    return Session({"type": "session", "version": 1, "id": "s-inbox", "createdAt": 0, "delegationDepth": 0})


def test_a_duplicate_id_is_refused_with_the_runtime_text_and_nothing_logged():
    s = session()
    inbox = Inbox(s)
    m = user_message("x")
    inbox.append("next-turn", m)
    with pytest.raises(InboxError) as err:
        inbox.append("next-step", dict(m))  # a copy, same id
    assert (err.value.code, err.value.message) == ("DUPLICATE_MESSAGE", render("R-INBOX-DUPLICATE", id=m["id"]))
    assert len(s.events) == 1 and inbox.next_step == []


def test_an_unknown_target_is_an_invalid_splice_with_the_runtime_text():
    s = session()
    with pytest.raises(InboxError) as err:
        Inbox(s).append("later", user_message("x"))
    assert (err.value.code, err.value.message) == ("INVALID_SPLICE", render("R-INBOX-TARGET", target="later"))
    assert s.events == []


def test_rebuilding_from_a_splice_past_the_list_end_is_session_corrupt():
    bad = {"type": "agent/inbox/spliced", "seq": 7, "time": 0,
           "data": {"target": "next-turn", "start": 0, "inserted": [], "removedCount": 1}}
    s = Session(session().header, [bad])
    with pytest.raises(SessionError) as err:
        Inbox(s)
    assert (err.value.code, err.value.message) == ("SESSION_CORRUPT", "invalid inbox splice at seq 7")


def test_runtime_texts_are_their_own_table_beside_the_spec_texts():
    """`TEXTS` stays exactly the spec's T- ids (tests/test_texts.py); runtime wording is R-."""
    assert all(tid.startswith("R-") for tid in RUNTIME_TEXTS)
    assert not set(RUNTIME_TEXTS) & set(TEXTS)
    assert render("R-INBOX-SPLICE", seq=3) == "invalid inbox splice at seq 3"


def test_the_duplicate_check_follows_claims_removals_and_rebuilds():
    """Issue 13 keeps the ids of both lists in a set; it must track every mutation: an id is
    refused while it is queued, accepted again once it was claimed or removed, and a rebuilt inbox
    refuses exactly the ids its log leaves queued."""
    s = session()
    inbox = Inbox(s)
    a, b, c = user_message("a"), user_message("b"), user_message("c")
    inbox.append("next-turn", a)
    inbox.append("next-step", b)
    inbox.append("next-turn", c)
    assert [m["id"] for m in inbox.claim("next-turn", 1)] == [b["id"], a["id"]]
    assert inbox.remove(c["id"]) is True and inbox.find(c["id"]) is None
    inbox.append("next-step", dict(a))  # claimed: the id is free again
    inbox.append("next-turn", dict(c))  # removed: free again
    rebuilt = Inbox(s)
    for m in (a, c):
        with pytest.raises(InboxError) as err:
            rebuilt.append("next-turn", dict(m))
        assert err.value.code == "DUPLICATE_MESSAGE"
    rebuilt.append("next-turn", dict(b))  # claimed in the log: not queued after the rebuild
    assert rebuilt.find(b["id"]) == ("next-turn", 1)


def test_a_claimed_message_keeps_its_splice_text_for_the_step_that_enters_it_once():
    """issue 13: the entering step appends `user/message` with the text the splice made, so the
    text is handed out only for the very object the latest claim returned, and only once."""
    from dsh.loader.session._codec import _encode

    s = session()
    inbox = Inbox(s)
    first, second = user_message("a"), user_message("b")
    inbox.append("next-turn", first)
    inbox.append("next-turn", second)
    [claimed] = inbox.claim("next-turn", 1)
    assert inbox.entry_text(dict(claimed)) is None  # an equal copy is not the object the log holds
    assert inbox.entry_text(claimed) == _encode(claimed) == _encode(first)
    assert inbox.entry_text(claimed) is None  # once
    [later] = inbox.claim("next-turn", 2)
    assert inbox.entry_text(later) == _encode(second)


def test_a_message_discarded_or_claimed_earlier_has_no_entry_text():
    s = session()
    inbox = Inbox(s)
    kept, dropped = user_message("a"), user_message("b")
    inbox.append("next-turn", kept)
    [claimed] = inbox.claim("next-turn", 1)
    inbox.append("next-step", dropped)
    stored = inbox.next_step[0]
    inbox.clear()
    assert inbox.claim("next-step", 1) == []  # a new claim replaces the last one's texts
    assert inbox.entry_text(claimed) is None and inbox.entry_text(stored) is None
    assert inbox._texts == {} and inbox._claimed_texts == {}  # nothing kept for messages gone
