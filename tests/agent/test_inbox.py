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
