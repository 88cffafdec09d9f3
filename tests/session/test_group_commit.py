"""Group commit of the store's syncs (issue 13; `loader.session._syncgroup`).

With `persistence.fsync` on, every batch and every creation asks for a sync; the requests of one
loop iteration share one `StoreIO.sync` call. What must hold: a flush that returns means the batch
was covered by a sync that returned (rule "a flush that returns means fsynced"); a failed sync fails
every flush of its group with CHECKPOINT_FAILED and cuts each batch back (truncate-on-failure); the
syncs coalesce; and the order of a replay run does not depend on them (inline).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from dsh.loader.errors import CheckpointError
from dsh.loader.session import FileIO, SessionStore, make_header, read
from dsh.loader.session._syncgroup import SYNCFS_MIN_TARGETS, SyncGroup, sync_targets


class RecordingIO(FileIO):
    """The real I/O; records each write (with the bytes then on disk) and each group sync."""

    def __init__(self, fail_syncs: int = 0) -> None:
        self.fail_syncs = fail_syncs
        self.events: list[tuple[str, object]] = []

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        super().write(path, data, fsync)
        self.events.append(("write", path.parent.name))

    def sync(self, fds: list[int], dirs: list[Path]) -> None:
        self.events.append(("sync", (len(fds), len(dirs))))
        if self.fail_syncs > 0:
            self.fail_syncs -= 1
            raise OSError(5, "Input/output error (injected)")
        super().sync(fds, dirs)


def syncs(io: RecordingIO) -> list[object]:
    return [what for kind, what in io.events if kind == "sync"]


@pytest.mark.parametrize("inline", [False, True])
async def test_flushes_of_one_loop_iteration_share_one_sync(tmp_path: Path, inline: bool) -> None:
    io = RecordingIO()
    store = SessionStore(tmp_path / "home", batch_delay_ms=60_000, fsync=True, io=io, inline_io=inline)
    sessions = [await store.create(make_header(f"session-{i}", created_at=1)) for i in range(5)]
    io.events.clear()
    for session in sessions:
        session.append("turn/start", {"turn": 1})

    await asyncio.gather(*(store.flush(session) for session in sessions))

    if inline:  # replay: the writes run in the same iteration, so exactly one group
        assert syncs(io) == [(5, 0)]
        assert [kind for kind, _ in io.events] == ["write"] * 5 + ["sync"]
    else:  # worker threads finish when they finish: the groups vary, each batch is synced once
        assert sum(fds for fds, _ in syncs(io)) == 5  # type: ignore[misc]
        assert io.events[-1][0] == "sync"
    for session in sessions:
        assert [e["type"] for e in read(store.path(session.id)).events] == ["turn/start"]
        await store.close(session)


@pytest.mark.parametrize("inline", [False, True])
async def test_creations_of_one_loop_iteration_share_their_two_syncs(tmp_path: Path, inline: bool) -> None:
    io = RecordingIO()
    store = SessionStore(tmp_path / "home", batch_delay_ms=0, fsync=True, io=io, inline_io=inline)
    await store.create(make_header("session-first", created_at=1))  # makes home/ and sessions/
    io.events.clear()

    created = await asyncio.gather(*(store.create(make_header(f"session-{i}", created_at=1)) for i in range(4)))

    if inline:  # one sync of the four headers before any is linked, one of the new entries + sessions/
        assert syncs(io) == [(4, 0), (0, 5)]
    else:  # thread timing decides the groups; every header and every entry is still synced
        assert sum(fds for fds, _ in syncs(io)) == 4  # type: ignore[misc]
        assert sum(dirs for _, dirs in syncs(io)) >= 5  # type: ignore[misc]
    for session in created:
        assert read(store.path(session.id)).header["id"] == session.id


@pytest.mark.parametrize("inline", [False, True])
async def test_a_flush_returns_only_after_the_sync_that_covers_it(tmp_path: Path, inline: bool) -> None:
    order: list[str] = []

    class Gate(FileIO):
        def sync(self, fds: list[int], dirs: list[Path]) -> None:
            order.append("sync")
            super().sync(fds, dirs)

    store = SessionStore(tmp_path / "home", batch_delay_ms=60_000, fsync=True, io=Gate(), inline_io=inline)
    session = await store.create(make_header("session-a", created_at=1))
    order.clear()
    session.append("turn/start", {"turn": 1})

    await store.flush(session)
    order.append("flushed")

    assert order == ["sync", "flushed"]
    await store.close(session)


async def test_a_failed_sync_fails_every_flush_of_its_group_and_cuts_each_batch_back(tmp_path: Path) -> None:
    io = RecordingIO()
    store = SessionStore(tmp_path / "home", batch_delay_ms=60_000, fsync=True, io=io, inline_io=True)
    a = await store.create(make_header("session-a", created_at=1))
    b = await store.create(make_header("session-b", created_at=1))
    sizes = {s.id: os.path.getsize(store.path(s.id)) for s in (a, b)}
    a.append("turn/start", {"turn": 1})
    b.append("turn/start", {"turn": 1})
    io.fail_syncs = 2  # the write-behind attempt (already started), then the barrier's retry

    results = await asyncio.gather(store.flush(a), store.flush(b), return_exceptions=True)

    assert [type(r) for r in results] == [CheckpointError, CheckpointError]
    assert all(r.code == "CHECKPOINT_FAILED" for r in results if isinstance(r, CheckpointError))
    assert {s.id: os.path.getsize(store.path(s.id)) for s in (a, b)} == sizes  # truncated back
    # The batches stayed queued: the next flush writes each exactly once.
    await store.flush(a)
    await store.flush(b)
    for session in (a, b):
        assert [e["seq"] for e in read(store.path(session.id)).events] == [0]
        await store.close(session)


def test_sync_targets_syncs_small_groups_per_target_and_large_ones_per_filesystem(tmp_path: Path) -> None:
    # Both branches must accept real descriptors and directories (and raise nothing).
    fds = [os.open(tmp_path / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o600) for i in range(SYNCFS_MIN_TARGETS)]
    try:
        sync_targets(fds[:1], [tmp_path])
        sync_targets(fds, [tmp_path])
    finally:
        for fd in fds:
            os.close(fd)


async def test_an_inline_flush_without_fsync_returns_without_suspending(tmp_path: Path) -> None:
    """Issue 13 item (a): under inline I/O (replay) with nothing in flight, the checkpoint is a plain
    write, no barrier or writer task: the coroutine finishes at its first step."""
    store = SessionStore(tmp_path / "home", batch_delay_ms=60_000, fsync=False, inline_io=True)
    session = await store.create(make_header("session-a", created_at=1))
    session.append("turn/start", {"turn": 1})

    flush = store.flush(session)
    with pytest.raises(StopIteration):
        flush.send(None)  # a suspension would yield a future here instead

    assert [e["type"] for e in read(store.path(session.id)).events] == ["turn/start"]
    await store.close(session)


async def test_an_inline_group_starts_one_pass_later_so_wakes_of_the_same_iteration_share_it(tmp_path: Path) -> None:
    """Under inline I/O a checkpoint requests its sync the moment it writes; a request made by a
    callback queued behind the first one's must still join its group (`SyncGroup._collect`)."""
    groups: list[list[int]] = []
    group = SyncGroup(lambda fds, dirs: groups.append(fds), inline=True)
    loop = asyncio.get_running_loop()

    first = group.request(fds=[1])
    loop.call_soon(group.request, [2])  # queued after the group's start was

    await asyncio.shield(first)
    assert groups == [[1, 2]]


async def test_a_checkpoint_right_after_a_write_behind_batch_shares_its_sync(tmp_path: Path) -> None:
    """Under inline I/O a barrier that finds its session's write-behind batch waiting for a group
    that has not run writes the rest behind it, and one sync covers both (issue 13: two syncs in a
    row before). The flush still returns only after that sync, with both batches committed."""
    io = RecordingIO()
    store = SessionStore(tmp_path / "home", batch_delay_ms=0, fsync=True, io=io, inline_io=True)
    session = await store.create(make_header("session-a", created_at=1))
    io.events.clear()
    session.append("turn/start", {"turn": 1})
    await asyncio.sleep(0)  # one ready-queue pass: the write-behind timer writes its batch
    assert [kind for kind, _ in io.events] == ["write"]
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})

    await store.flush(session)

    assert [kind for kind, _ in io.events] == ["write", "write", "sync"]
    assert [e["type"] for e in read(store.path(session.id)).events] == ["turn/start", "turn/end"]
    await store.close(session)
    assert syncs(io) == [(1, 0)]  # the close found nothing left to write or sync


async def test_a_failed_shared_sync_cuts_both_batches_back_and_the_barrier_writes_them_again(tmp_path: Path) -> None:
    """The shared sync fails: both batches are cut back (truncate-on-failure), stay queued, and the
    barrier retries the write in flight as it always has: one write of both, one sync, each event once."""
    io = RecordingIO()
    store = SessionStore(tmp_path / "home", batch_delay_ms=0, fsync=True, io=io, inline_io=True)
    session = await store.create(make_header("session-a", created_at=1))
    io.events.clear()
    session.append("turn/start", {"turn": 1})
    await asyncio.sleep(0)  # the timer's batch is written and waits for its group
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    io.fail_syncs = 1

    await store.flush(session)

    assert [kind for kind, _ in io.events] == ["write", "write", "sync", "write", "sync"]
    assert [e["seq"] for e in read(store.path(session.id)).events] == [0, 1]
    await store.close(session)


async def test_an_inline_barrier_waits_for_what_was_appended_before_it_not_after(tmp_path: Path) -> None:
    """A checkpoint covers the lines queued before it (§5.5; issue 13 revises §5.4 item 3's "drains
    the queue"): a line another agent appends while the barrier waits for its group sync is left to
    the write-behind timer, so the barrier does not wait for a second sync; nothing is lost."""
    order: list[str] = []
    later: list[object] = []

    class Gate(FileIO):
        def sync(self, fds: list[int], dirs: list[Path]) -> None:
            order.append("sync")
            super().sync(fds, dirs)
            if later:  # inline: the group sync runs on the loop thread, between two tasks' steps
                session.append("turn/end", later.pop())

    store = SessionStore(tmp_path / "home", batch_delay_ms=0, fsync=True, io=Gate(), inline_io=True)
    session = await store.create(make_header("session-a", created_at=1))
    order.clear()
    session.append("turn/start", {"turn": 1})
    later.append({"turn": 1, "reason": {"kind": "completed"}})

    await store.flush(session)
    order.append("flushed")

    assert order == ["sync", "flushed"]
    await store.close(session)  # the leftover is written and synced, once
    assert order == ["sync", "flushed", "sync"]
    assert [e["type"] for e in read(store.path(session.id)).events] == ["turn/start", "turn/end"]
