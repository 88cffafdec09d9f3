"""The JSONL store (SPEC §5.1, §5.4, §5.6).

Order is established by facts, not time: `await store.flush(...)`, or a threading.Event set by an
I/O double at a known point. The doubles override only `FileIO.write`, so the store's own
truncate-back path is what gets tested.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import threading
import os
import stat
from pathlib import Path

import pytest

from dsh.loader.errors import CheckpointError, SessionError
from dsh.loader.session import Session, SessionStore, make_header, validate_log
from dsh.loader.texts import render

from .conftest import MakeStore
from .helpers import FailingIO, GateIO, assistant_with_calls, build_log, file_events, line, write_session_file

SID = "session-s"


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def holds_lock(path: Path) -> bool:
    """True if some open file description holds the flock (flock conflicts across descriptions)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def run_turn(session: Session, turn: int = 1) -> None:
    session.append("turn/start", {"turn": turn})
    session.append("step/start", {"turn": turn, "step": 1})
    session.append("step/end", {"turn": turn, "step": 1})
    session.append("turn/end", {"turn": turn, "reason": {"kind": "completed"}})


# -- create -------------------------------------------------------------------------------------


async def test_create_makes_private_dirs_and_file_with_the_header_line(make_store: MakeStore) -> None:
    store = make_store(fsync=True)
    header = make_header(SID, created_at=7, cwd="/work")
    session = await store.create(header)
    path = store.path(SID)
    assert path == store.home / "sessions" / SID / "session.jsonl"
    assert mode(store.home) == mode(store.sessions_dir) == mode(path.parent) == 0o700
    assert mode(path) == 0o600
    assert path.read_bytes() == (
        b'{"type":"session","version":1,"id":"session-s","createdAt":7,"cwd":"/work","delegationDepth":0}\n'
    )
    assert session.header == header and session.events == [] and not session.closed
    assert store.is_live(SID) and store.get_live(SID) is session and store.exists(SID)


async def test_create_makes_missing_parents_of_home_private_too(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "a" / "b", batch_delay_ms=0, fsync=False)
    session = await store.create(make_header(SID))
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700
    await store.close(session)


async def test_create_of_an_existing_id_is_session_exists(store: SessionStore) -> None:
    first = await store.create(make_header(SID))
    with pytest.raises(SessionError) as live:
        await store.create(make_header(SID))
    await store.close(first)
    with pytest.raises(SessionError) as on_disk:
        await store.create(make_header(SID))
    assert live.value.code == on_disk.value.code == "SESSION_EXISTS"
    assert not store.is_live(SID)


@pytest.mark.parametrize("session_id", ["../evil", "", "-leading-dash", "a" * 129, "has space"])
async def test_create_refuses_an_invalid_session_id(store: SessionStore, session_id: str) -> None:
    with pytest.raises(SessionError) as info:
        await store.create(make_header(session_id))
    assert info.value.code == "INVALID_SESSION_ID"
    assert not store.sessions_dir.exists() or list(store.sessions_dir.iterdir()) == []


async def test_create_holds_an_exclusive_lock_until_close(store: SessionStore) -> None:
    session = await store.create(make_header(SID))
    assert holds_lock(store.path(SID))
    await store.close(session)
    assert not holds_lock(store.path(SID))


def test_exists_is_false_for_unknown_and_invalid_ids(store: SessionStore) -> None:
    assert not store.exists(SID) and not store.exists("../x")


def test_exists_is_true_for_a_directory_whose_creation_began(store: SessionStore) -> None:
    """An id whose directory exists is taken even without its file (a killed creation leaves one):
    a new child must not reuse it; a file where the sessions directory should be reads as absent."""
    store.path(SID).parent.mkdir(parents=True)
    assert store.exists(SID) and not store.exists("session-t")
    blocked = SessionStore(store.home / "sessions" / SID)  # its "sessions" dir would be under a dir
    (store.home / "sessions" / SID / "sessions").write_text("not a directory")
    assert not blocked.exists("session-u")


# -- write-behind -------------------------------------------------------------------------------


async def test_appends_in_one_sync_burst_are_written_as_one_batch(make_store: MakeStore) -> None:
    io = FailingIO()
    store = make_store(io=io)
    session = await store.create(make_header(SID))
    events = [session.append("turn/start", {"turn": 1}),
              session.append("step/start", {"turn": 1, "step": 1}),
              session.append("step/end", {"turn": 1, "step": 1})]
    await store.flush(session)
    assert io.written == [b"".join(line(e) for e in events)]
    assert file_events(store.path(SID)) == events


async def test_zero_delay_timer_writes_without_a_flush(make_store: MakeStore) -> None:
    io = FailingIO()
    store = make_store(io=io)
    session = await store.create(make_header(SID))
    event = session.append("turn/start", {"turn": 1})
    assert await asyncio.to_thread(io.wrote.wait, 5)
    assert file_events(store.path(SID)) == [event]
    await store.flush(session)
    assert len(io.attempts) == 1  # the flush found nothing more to write


async def test_flush_with_nothing_queued_writes_nothing(make_store: MakeStore) -> None:
    io = FailingIO()
    store = make_store(io=io)
    session = await store.create(make_header(SID))
    await store.flush(session)
    assert io.attempts == []


async def test_flush_cancels_a_pending_timer_and_drains_the_queue(make_store: MakeStore) -> None:
    io = FailingIO()
    store = make_store(io=io, batch_delay_ms=60_000)
    session = await store.create(make_header(SID))
    run_turn(session)
    assert io.attempts == []  # still waiting for the (long) timer
    await store.flush(session)
    assert len(io.written) == 1
    assert [e["seq"] for e in file_events(store.path(SID))] == [0, 1, 2, 3]


async def test_concurrent_flushes_share_one_barrier_behind_an_in_flight_write(make_store: MakeStore) -> None:
    io = GateIO()
    store = make_store(io=io)
    session = await store.create(make_header(SID))
    first = session.append("turn/start", {"turn": 1})
    assert await asyncio.to_thread(io.entered.wait, 5)  # the timer's write is now in flight
    second = session.append("step/start", {"turn": 1, "step": 1})
    flushes = [asyncio.create_task(store.flush(session)) for _ in range(3)]
    io.gate.set()
    await asyncio.wait_for(asyncio.gather(*flushes), 5)
    # One write in flight, then one barrier write of what queued behind it; never two at once.
    assert io.written == [line(first), line(second)]
    assert io.max_concurrent == 1
    assert file_events(store.path(SID)) == [first, second]


def test_append_without_a_running_loop_waits_for_the_next_flush(tmp_path: Path) -> None:
    store = SessionStore(tmp_path, batch_delay_ms=0, fsync=False)
    session = asyncio.run(store.create(make_header(SID)))
    event = session.append("turn/start", {"turn": 1})
    assert file_events(store.path(SID)) == []
    asyncio.run(store.flush(session))
    assert file_events(store.path(SID)) == [event]
    asyncio.run(store.close(session))


async def test_failing_append_truncates_and_the_batch_is_retried_on_next_flush(make_store: MakeStore) -> None:
    """Matrix 28: a failed batch is cut back to the previous size, stays queued, and is written once."""
    io = FailingIO()
    store = make_store(io=io, batch_delay_ms=60_000)
    session = await store.create(make_header(SID))
    session.append("turn/start", {"turn": 1})
    await store.flush(session)
    before = store.path(SID).read_bytes()

    io.fail_next, io.partial = 2, 17  # each failure leaves 17 stray bytes before raising
    session.append("step/start", {"turn": 1, "step": 1})
    session.append("step/end", {"turn": 1, "step": 1})
    for _ in range(2):
        with pytest.raises(CheckpointError) as info:
            await store.flush(session)
        assert info.value.code == "CHECKPOINT_FAILED"
        assert store.path(SID).read_bytes() == before
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await store.flush(session)

    assert io.attempts[1] == io.attempts[2] == io.attempts[3][: len(io.attempts[1])]  # same batch, retried
    assert [e["seq"] for e in file_events(store.path(SID))] == [0, 1, 2, 3]
    assert file_events(store.path(SID)) == session.events


async def test_failed_timer_write_is_retried_by_the_next_enqueue(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Matrix 28: the failure is remembered and logged; the next append's timer retries the batch."""
    io = FailingIO(fail_next=1, partial=5)
    store = make_store(io=io)
    session = await store.create(make_header(SID))
    size = store.path(SID).stat().st_size
    logged = threading.Event()

    class Flag(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "write of 1 events failed" in record.getMessage():
                logged.set()

    flag = Flag()
    logging.getLogger("dsh.loader.session.store").addHandler(flag)
    try:
        with caplog.at_level(logging.WARNING, logger="dsh.loader.session.store"):
            session.append("turn/start", {"turn": 1})
            # The store logs only once the failed write is fully handled; append after that, so
            # the retry comes from this enqueue and not from the still in-flight failed write.
            assert await asyncio.to_thread(logged.wait, 5)
            assert io.truncated.is_set()
            assert store.path(SID).stat().st_size == size
            session.append("step/start", {"turn": 1, "step": 1})
            assert await asyncio.to_thread(io.wrote.wait, 5)
    finally:
        logging.getLogger("dsh.loader.session.store").removeHandler(flag)
    await store.flush(session)
    assert [e["seq"] for e in file_events(store.path(SID))] == [0, 1]
    assert any("write of 1 events failed" in r.getMessage() for r in caplog.records)


async def test_stray_bytes_left_by_a_failed_truncate_are_cut_before_the_retry(make_store: MakeStore) -> None:
    """Matrix 28: even when truncating back fails, the retried batch lands once, right after the header."""

    class BadTruncate(FailingIO):
        def truncate(self, path: Path, size: int, fsync: bool) -> None:
            if not self.truncated.is_set():
                self.truncated.set()
                raise OSError(5, "I/O error (injected)")
            super().truncate(path, size, fsync)

    io = BadTruncate(fail_next=1, partial=9)
    store = make_store(io=io, batch_delay_ms=60_000)
    session = await store.create(make_header(SID))
    header_size = store.path(SID).stat().st_size
    event = session.append("turn/start", {"turn": 1})
    with pytest.raises(CheckpointError):
        await store.flush(session)
    assert store.path(SID).stat().st_size == header_size + 9  # the stray bytes stayed
    await store.flush(session)
    assert file_events(store.path(SID)) == [event]


# -- close --------------------------------------------------------------------------------------


async def test_close_flushes_unlocks_and_is_idempotent(make_store: MakeStore) -> None:
    store = make_store(batch_delay_ms=60_000)
    session = await store.create(make_header(SID))
    run_turn(session)
    await asyncio.gather(store.close(session), store.close(session))
    await store.close(session)
    assert session.closed and not store.is_live(SID) and store.get_live(SID) is None
    assert file_events(store.path(SID)) == session.events
    assert not holds_lock(store.path(SID))
    with pytest.raises(SessionError) as info:
        session.append("turn/start", {"turn": 2})
    assert info.value.code == "SESSION_CLOSED"


async def test_close_logs_a_failing_final_flush_instead_of_raising(
    make_store: MakeStore, caplog: pytest.LogCaptureFixture
) -> None:
    store = make_store(io=FailingIO(fail_next=99), batch_delay_ms=60_000)
    session = await store.create(make_header(SID))
    session.append("turn/start", {"turn": 1})
    with caplog.at_level(logging.ERROR, logger="dsh.loader.session.store"):
        await store.close(session)
    assert session.closed and not store.is_live(SID)
    assert any("final flush failed" in r.getMessage() for r in caplog.records)


# -- load ---------------------------------------------------------------------------------------


async def test_load_of_a_session_live_in_this_store_is_session_busy(store: SessionStore) -> None:
    session = await store.create(make_header(SID))
    with pytest.raises(SessionError) as info:
        await store.load(SID)
    assert info.value.code == "SESSION_BUSY"
    assert store.get_live(SID) is session


async def test_close_releases_the_lock_so_load_resumes_the_log(store: SessionStore) -> None:
    session = await store.create(make_header(SID, created_at=3))
    run_turn(session)
    await store.close(session)
    before = store.path(SID).read_bytes()

    loaded = await store.load(SID)
    assert loaded is not session and store.get_live(SID) is loaded
    assert loaded.header == session.header and loaded.events == session.events
    assert store.path(SID).read_bytes() == before  # nothing to repair, nothing written
    assert holds_lock(store.path(SID))
    assert loaded.append("turn/start", {"turn": 2})["seq"] == 4
    await store.flush(loaded)
    assert file_events(store.path(SID)) == loaded.events


async def test_load_held_by_another_run_is_session_busy_and_leaves_the_file_untouched(
    store: SessionStore,
) -> None:
    raw = write_session_file(store.path(SID), build_log(("turn/start", {"turn": 1})), tail=b"{torn")
    fd = os.open(store.path(SID), os.O_RDONLY)  # another run's lock: flock conflicts across descriptions
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(SessionError) as info:
            await store.load(SID)
    finally:
        os.close(fd)
    assert info.value.code == "SESSION_BUSY"
    assert store.path(SID).read_bytes() == raw and not store.is_live(SID)


async def test_load_drops_a_torn_final_line_and_continues_the_seq(store: SessionStore) -> None:
    """Matrix 25: the torn line is dropped, earlier bytes stay identical, the next append continues seq."""
    events = build_log(("turn/start", {"turn": 1}), ("step/start", {"turn": 1, "step": 1}),
                       ("step/end", {"turn": 1, "step": 1}),
                       ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    torn = line({"type": "turn/start", "seq": 4, "time": 5, "data": {"turn": 2}})[:-9]
    raw = write_session_file(store.path(SID), events, tail=torn)
    good = raw[: len(raw) - len(torn)]

    session = await store.load(SID)
    assert session.events == events
    assert store.path(SID).read_bytes() == good
    event = session.append("turn/start", {"turn": 2})
    assert event["seq"] == 4
    await store.flush(session)
    assert store.path(SID).read_bytes() == good + line(event)


@pytest.mark.parametrize(("after_last_turn_end", "code"), [
    pytest.param(False, "SESSION_CORRUPT", id="m26-before-turn-end"),
    pytest.param(True, None, id="m26-after-last-turn-end"),
])
async def test_load_of_damaged_line(store: SessionStore, after_last_turn_end: bool, code: str | None) -> None:
    """Matrix 26: damage before a committed `turn/end` is refused; after the last one it is cut off."""
    events = build_log(("turn/start", {"turn": 1}), ("step/start", {"turn": 1, "step": 1}),
                       ("step/end", {"turn": 1, "step": 1}),
                       ("turn/end", {"turn": 1, "reason": {"kind": "completed"}}))
    keep = events if after_last_turn_end else events[:2]
    after = [] if after_last_turn_end else events[2:]
    later = [{"type": "turn/start", "seq": 4, "time": 9, "data": {"turn": 2}}] if after_last_turn_end else []
    raw = write_session_file(store.path(SID), keep,
                             tail=b'{"type":"st\x00\n' + b"".join(line(e) for e in after + later))
    if code is not None:
        with pytest.raises(SessionError) as info:
            await store.load(SID)
        assert info.value.code == code
        assert store.path(SID).read_bytes() == raw and not store.is_live(SID)
        assert not holds_lock(store.path(SID))
        return
    session = await store.load(SID)
    assert session.events == keep
    assert file_events(store.path(SID)) == keep
    assert raw.startswith(store.path(SID).read_bytes())


async def test_load_closes_an_interrupted_turn_in_the_file(store: SessionStore) -> None:
    """Matrix 24: a crash mid-step leaves calls pending; load appends the closers as one batch."""
    events = build_log(
        ("turn/start", {"turn": 1}), ("step/start", {"turn": 1, "step": 1}),
        ("assistant/message", assistant_with_calls(1, 1, "ran", "never")),
        ("tool/call", {"turn": 1, "step": 1, "callId": "ran", "name": "echo", "arguments": "{}"}),
    )
    torn = b'{"type":"tool/result","seq":4'
    raw = write_session_file(store.path(SID), events, tail=torn)

    session = await store.load(SID)
    closers = session.events[len(events):]
    assert [(c["type"], c["seq"], c["data"].get("error", {}).get("code")) for c in closers] == [
        ("tool/result", 4, "TOOL_OUTCOME_UNKNOWN"),
        ("tool/result", 5, "TOOL_NOT_STARTED"),
        ("step/end", 6, None),
        ("turn/end", 7, None),
    ]
    assert closers[-1]["data"] == {"turn": 1, "reason": {"kind": "interrupted"}}
    on_disk = store.path(SID).read_bytes()
    assert on_disk.startswith(raw[: len(raw) - len(torn)])  # committed bytes never rewritten
    assert file_events(store.path(SID)) == session.events
    validate_log(session.events)
    texts = [m["content"][0]["content"][0]["text"] for m in session.derive_messages()[1:]]
    assert texts == [render("T-REPAIR-UNKNOWN"), render("T-REPAIR-NOT-STARTED")]
    assert session.append("turn/start", {"turn": 2})["seq"] == 8


async def test_load_of_a_newer_format_is_refused(store: SessionStore) -> None:
    """Matrix 30: header `version: 2` → NEWER_FORMAT, and the file is left as it was."""
    raw = write_session_file(store.path(SID), [], header={**make_header(SID), "version": 2}, tail=b"{torn")
    with pytest.raises(SessionError) as info:
        await store.load(SID)
    assert info.value.code == "NEWER_FORMAT"
    assert store.path(SID).read_bytes() == raw
    with pytest.raises(SessionError) as read_info:
        store.read(SID)
    assert read_info.value.code == "NEWER_FORMAT"


@pytest.mark.parametrize(("events", "header_id", "code"), [
    pytest.param(build_log(("session/fork", {})), SID, "UNKNOWN_EVENT", id="unknown-type"),
    pytest.param(build_log(("turn/start", {"turn": 2})), SID, "INVALID_LOG", id="invalid-log"),
    pytest.param([], "session-other", "SESSION_CORRUPT", id="header-id-mismatch"),
])
async def test_load_refuses_logs_it_cannot_resume(
    store: SessionStore, events: list[dict[str, object]], header_id: str, code: str
) -> None:
    raw = write_session_file(store.path(SID), events, header=make_header(header_id))
    with pytest.raises(SessionError) as info:
        await store.load(SID)
    assert info.value.code == code
    assert store.path(SID).read_bytes() == raw and not store.is_live(SID)


async def test_load_accepts_ignorable_unknown_events(store: SessionStore) -> None:
    events = build_log(("x/later", {"v": 1}, {"ignorable": True}))
    write_session_file(store.path(SID), events)
    assert (await store.load(SID)).events == events


async def test_load_of_a_missing_session_is_session_not_found(store: SessionStore) -> None:
    with pytest.raises(SessionError) as info:
        await store.load(SID)
    assert info.value.code == "SESSION_NOT_FOUND"


async def test_repair_io_failure_is_a_checkpoint_error_and_releases_the_lock(make_store: MakeStore) -> None:
    store = make_store(io=FailingIO(fail_next=1, partial=3))
    events = build_log(("turn/start", {"turn": 1}))
    raw = write_session_file(store.path(SID), events)
    with pytest.raises(CheckpointError):
        await store.load(SID)
    assert store.path(SID).read_bytes() == raw
    assert not holds_lock(store.path(SID)) and not store.is_live(SID)
    assert json.loads(raw.splitlines()[1]) == events[0]


async def test_cancelled_load_does_not_leave_the_file_locked(make_store: MakeStore) -> None:
    class SlowTruncate(GateIO):
        def truncate(self, path: Path, size: int, fsync: bool) -> None:
            self.entered.set()
            assert self.gate.wait(5), "gate never opened"
            super().truncate(path, size, fsync)

    io = SlowTruncate()
    store = make_store(io=io)
    write_session_file(store.path(SID), build_log(("turn/start", {"turn": 1})), tail=b"{torn")
    task = asyncio.create_task(store.load(SID))
    assert await asyncio.to_thread(io.entered.wait, 5)  # the repair thread holds the lock now
    task.cancel()
    io.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not store.is_live(SID)

    async def unlocked() -> None:
        while holds_lock(store.path(SID)):
            await asyncio.sleep(0)  # reason: the release runs in a done-callback once the thread ends

    await asyncio.wait_for(unlocked(), 5)
