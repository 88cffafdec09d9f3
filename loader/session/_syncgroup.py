"""Group commit of the store's durability syncs (issue 13; SPEC §5.4 with `persistence.fsync`).

An fsync costs milliseconds on a shared disk, and a fan-out of 1,000 children asked for 6,000 of
them: one per batch per session plus three per created session. Every request made during one loop
iteration is instead satisfied by one sync: `SyncGroup.sync` registers its descriptors and
directories and awaits a future shared by all requests of that iteration; a `call_soon` callback
(FIFO behind every task that was ready when the first request came; under inline I/O one pass
later still, `_collect`) runs one `StoreIO.sync` for all of them. While a group sync is in flight, new requests collect into the next group.

The sync itself (`sync_targets`): Linux `syncfs(2)` flushes every dirty page and inode of one
filesystem with one journal commit and one cache flush, and since Linux 5.8 reports writeback errors,
so for a group of several targets it is both cheaper and as strong as fsyncing each (one `syncfs`
per device among the targets). Small groups, and systems without `syncfs`, fsync each target.

Rule "a flush that returns means fsynced": a requester resumes only after the sync that covered
its targets returned; a failure is raised to every requester of that group (each one truncates its
own batch back, `append_batch`'s rule). Replay runs (`inline`, SPEC §26 item 1) run the sync on the
loop thread inside that callback, so the order of everything is a function of the ready queue alone.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = ["SYNCFS_MIN_TARGETS", "SyncGroup", "sync_targets"]

logger = logging.getLogger(__name__)

SYNCFS_MIN_TARGETS = 4
"""Below this many targets one fsync each is cheaper than syncing the whole filesystem."""


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_targets(fds: list[int], dirs: list[Path]) -> None:
    """Make every write to `fds` and every entry of `dirs` durable; raises `OSError`."""
    if _SYNCFS is None or len(fds) + len(dirs) < SYNCFS_MIN_TARGETS:
        for fd in fds:
            os.fsync(fd)
        for directory in dirs:
            _fsync_dir(directory)
        return
    devices: dict[int, int | Path] = {}
    for fd in fds:
        devices.setdefault(os.fstat(fd).st_dev, fd)
    for directory in dirs:
        devices.setdefault(os.stat(directory).st_dev, directory)
    for target in devices.values():
        fd = target if isinstance(target, int) else os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            if _SYNCFS(fd) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"syncfs: {os.strerror(err)}")
        finally:
            if not isinstance(target, int):
                os.close(fd)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # every requester may have been cancelled; the failure is theirs to see


class SyncGroup:
    """One sync per loop iteration for every descriptor and directory requested in it.

    Invariant: at most one group sync is in flight (`_running`); `_waiter` is the future of the
    group being collected, and exists exactly while `_fds or _dirs` is non-empty.
    """

    def __init__(self, sync: Callable[[list[int], list[Path]], None], *, inline: bool) -> None:
        self._sync = sync
        self._inline = inline
        self._fds: dict[int, None] = {}
        self._dirs: dict[Path, None] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._running = False
        self.groups = 0  # syncs run (for benchmarks and tests: how well requests coalesced)

    async def sync(self, fds: Iterable[int] = (), dirs: Iterable[Path] = ()) -> None:
        """Return once a sync covering `fds` and `dirs` has returned; raise its `OSError`."""
        await asyncio.shield(self.request(fds, dirs))

    def request(self, fds: Iterable[int] = (), dirs: Iterable[Path] = ()) -> asyncio.Future[None]:
        """Register `fds` and `dirs` with the group being collected; return that group's shared
        future (done once a sync covering them returned). Never await it unshielded: it is shared."""
        loop = asyncio.get_running_loop()
        for fd in fds:
            self._fds[fd] = None
        for directory in dirs:
            self._dirs[directory] = None
        waiter = self._waiter
        if waiter is None:
            waiter = self._waiter = loop.create_future()
            waiter.add_done_callback(_retrieve)
            if not self._running:
                loop.call_soon(self._collect if self._inline else self._start)
        return waiter

    def _collect(self) -> None:
        """Inline I/O: start the group one ready-queue pass later. There a checkpoint requests its
        sync the moment it writes (no barrier or writer task delays it), so without this pass the
        tasks woken by the same iteration's events would each miss the group and get their own
        (a 1,000-child fan-out ran 513 syncs instead of ~410). FIFO like every callback: no clock."""
        asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        waiter = self._waiter
        if waiter is None or self._running:
            return
        fds, dirs = list(self._fds), list(self._dirs)
        self._fds.clear()
        self._dirs.clear()
        self._waiter = None
        self._running = True
        self.groups += 1
        if self._inline:
            try:
                self._sync(fds, dirs)
            except Exception as exc:
                self._finish_with(waiter, exc)
            else:
                self._finish_with(waiter, None)
            return
        task = asyncio.get_running_loop().create_task(asyncio.to_thread(self._sync, fds, dirs))
        task.add_done_callback(lambda done: self._finish(waiter, done))

    def _finish(self, waiter: asyncio.Future[None], done: asyncio.Future[None]) -> None:
        if done.cancelled():  # the loop is going away: nobody may be told the data is durable
            self._running = False
            waiter.cancel()
            return
        self._finish_with(waiter, done.exception())

    def _finish_with(self, waiter: asyncio.Future[None], error: BaseException | None) -> None:
        self._running = False
        if not waiter.done():
            if error is None:
                waiter.set_result(None)
            else:
                logger.warning("group sync failed: %s", error)
                waiter.set_exception(error)
        if self._waiter is not None:  # requests that arrived while this sync was in flight
            asyncio.get_running_loop().call_soon(self._start)
