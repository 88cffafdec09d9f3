"""Hostile session files and directories against the real `SessionStore` (issue 15 items 1, 3, 4).

Each bad line the issue found is refused as `SESSION_CORRUPT` naming file, line and field, and the
file is left byte for byte as it was (checksum); a symlink, a FIFO or an untrusted directory is
refused as `SESSION_UNSAFE` before any open that could hang or any write. Tests run as root here,
so "owned by another user" is a `chown` to another uid.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_kit import SID, good_events, header, sha, write_session  # noqa: E402

from dsh.loader.errors import SessionError
from dsh.loader.session import SessionStore, read


def _load(home: Path, session_id: str = SID) -> Any:
    async def go() -> Any:
        store = SessionStore(home, batch_delay_ms=0, fsync=False)
        session = await store.load(session_id)
        await store.close(session)
        return session

    return asyncio.run(go())


def _with(index: int, data: dict[str, Any]) -> list[dict[str, Any]]:
    events = good_events()
    events[index]["data"] = data
    return events


# (events, line number in the file, field named) — each a case issue 15 item 3 found or one of its kin.
CORRUPT = [
    pytest.param(_with(0, {"target": "next-turn", "start": 0, "inserted": [{"role": "user", "content": []}]}),
                 2, "data.inserted[0].id", id="splice-inserted-without-id"),
    pytest.param(_with(9, {"turn": 1, "reason": "completed"}), 11, "data.reason", id="turn-end-reason-string"),
    pytest.param(_with(4, {"id": "m1", "role": "user", "content": "go"}), 6, "data.content", id="string-content"),
    pytest.param(_with(6, {"turn": 1, "step": 1, "callId": ["c1"], "name": "echo"}), 8, "data.callId",
                 id="list-call-id"),
    pytest.param(_with(1, {"turn": "1"}), 3, "data.turn", id="string-turn"),
    pytest.param(_with(3, {"turn": 1, "step": None}), 5, "data.step", id="null-step"),
    pytest.param(_with(2, {"target": "next-turn", "start": 0, "removedCount": "1"}), 4, "data.removedCount",
                 id="string-removed-count"),
    pytest.param(_with(0, {"target": "next-turn", "start": -1, "inserted": []}), 2, "data.start", id="negative-start"),
    pytest.param(_with(5, {"turn": 1, "step": 1, "message": "hi"}), 7, "data.message", id="string-message"),
]


@pytest.mark.parametrize(("events", "line", "field"), CORRUPT)
def test_a_bad_field_is_session_corrupt_naming_file_line_and_field_and_nothing_is_written(
    tmp_path: Path, events: list[dict[str, Any]], line: int, field: str
) -> None:
    path = write_session(tmp_path, events)
    before = sha(path)

    for attempt in (lambda: read(path), lambda: _load(tmp_path)):
        with pytest.raises(SessionError) as info:
            attempt()
        assert info.value.code == "SESSION_CORRUPT"
        assert info.value.message.startswith(f"{path}:{line}: {field} ")
    assert sha(path) == before


def test_a_bad_field_in_the_open_tail_is_not_truncated_as_torn(tmp_path: Path) -> None:
    """A complete line that parses is never a torn tail: no turn/end after it, still no truncation."""
    events = good_events()[:5]  # the turn is open: a load would repair it by appending closers
    events[4]["data"] = {"id": "m1", "role": "user", "content": {"type": "text"}}
    path = write_session(tmp_path, events)
    before = sha(path)

    with pytest.raises(SessionError, match="data.content") as info:
        _load(tmp_path)
    assert info.value.code == "SESSION_CORRUPT"
    assert sha(path) == before


def test_the_good_log_loads(tmp_path: Path) -> None:
    """The control case for the table above: the same file without the bad field loads."""
    write_session(tmp_path)
    assert [e["type"] for e in _load(tmp_path).events][-1] == "turn/end"


def test_a_symlinked_session_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    home = tmp_path / "h"
    outside = tmp_path / "outside.jsonl"
    path = write_session(home, good_events()[:5])  # open turn: a load would append closers
    os.replace(path, outside)
    path.symlink_to(outside)
    before = sha(outside)

    for attempt in (lambda: read(path), lambda: _load(home)):
        with pytest.raises(SessionError) as info:
            attempt()
        assert info.value.code == "SESSION_UNSAFE"
        assert "symbolic link" in info.value.message and str(path) in info.value.message
    assert sha(outside) == before


def test_a_fifo_in_place_of_the_session_file_is_refused_without_hanging(tmp_path: Path) -> None:
    path = write_session(tmp_path)
    path.unlink()
    os.mkfifo(path)

    async def both() -> None:
        for attempt in (lambda: read(path), lambda: _load(tmp_path)):
            with pytest.raises(SessionError, match="a FIFO") as info:
                await asyncio.wait_for(asyncio.to_thread(attempt), 10)  # backstop: a hang fails loudly
            assert info.value.code == "SESSION_UNSAFE"

    asyncio.run(both())


@pytest.mark.parametrize("which", ["home", "sessions", "session"])
@pytest.mark.parametrize("how", ["other-owner", "group-writable", "world-writable"])
def test_an_untrusted_directory_is_refused_before_any_write(tmp_path: Path, which: str, how: str) -> None:
    home = tmp_path / "h"
    path = write_session(home, good_events()[:5])  # open turn: a load would append closers
    target = {"home": home, "sessions": home / "sessions", "session": path.parent}[which]
    if how == "other-owner":
        os.chown(target, 4242, -1)
    else:
        target.chmod(0o770 if how == "group-writable" else 0o707)
    before = sha(path)

    with pytest.raises(SessionError) as info:
        _load(home)
    assert info.value.code == "SESSION_UNSAFE"
    assert str(target) in info.value.message
    assert ("chown" if how == "other-owner" else f"chmod 700 {target}") in info.value.message
    assert sha(path) == before
    read(path)  # reading needs no trust: read-only views still work


def test_create_refuses_an_untrusted_sessions_directory(tmp_path: Path) -> None:
    (tmp_path / "sessions").mkdir(mode=0o700)
    (tmp_path / "sessions").chmod(0o777)

    async def go() -> None:
        await SessionStore(tmp_path, fsync=False).create(header("s-new"))

    with pytest.raises(SessionError, match="chmod 700") as info:
        asyncio.run(go())
    assert info.value.code == "SESSION_UNSAFE"
    assert not (tmp_path / "sessions" / "s-new" / "session.jsonl").exists()


@pytest.mark.parametrize("how", ["other-owner", "world-writable"])
def test_a_later_create_still_refuses_an_untrusted_existing_session_directory(tmp_path: Path, how: str) -> None:
    """Home and sessions/ are checked in a store's first creation only (issue 13); a session
    directory that already exists (a leftover of a killed creation) is checked on every create."""
    leftover = tmp_path / "sessions" / "s-left"

    async def go() -> None:
        store = SessionStore(tmp_path, fsync=False, batch_delay_ms=0)
        first = await store.create(header("s-first"))  # checks home and sessions/
        leftover.mkdir(mode=0o700)
        if how == "other-owner":
            os.chown(leftover, 4242, -1)
        else:
            leftover.chmod(0o777)
        try:
            with pytest.raises(SessionError) as info:
                await store.create(header("s-left"))
            assert info.value.code == "SESSION_UNSAFE"
            assert str(leftover) in info.value.message
        finally:
            await store.close(first)

    asyncio.run(go())
    assert list(leftover.iterdir()) == []  # nothing written into it


def test_a_created_session_directory_is_private(tmp_path: Path) -> None:
    """The directory a create makes is not checked again (issue 13): it is made 0700, ours."""

    async def go() -> None:
        store = SessionStore(tmp_path, fsync=False, batch_delay_ms=0)
        for sid in ("s-a", "s-b"):
            await store.close(await store.create(header(sid)))

    asyncio.run(go())
    for sid in ("s-a", "s-b"):
        st = os.lstat(tmp_path / "sessions" / sid)
        assert st.st_uid == os.getuid() and st.st_mode & 0o077 == 0
