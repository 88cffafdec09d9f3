"""The inline write through the held descriptor (issue 13, `_fileio.append_held`): replay runs with
the real `FileIO` write each batch in one frame instead of `append_batch`'s calls. These tests drive
that path with real failures (no double, which would take `append_batch`) and pin the invariant of
`append_batch`: after a write returns or raises, the file is the committed bytes plus, on success,
the whole batch; a failed batch stays queued and a later flush writes it once.
"""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from dsh.loader.errors import CheckpointError
from dsh.loader.session import Session, SessionStore, make_header
from dsh.loader.session.envelope import encode_line


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "home", batch_delay_ms=0, fsync=False, inline_io=True)


def expected_file(session: Session) -> bytes:
    return encode_line(session.header) + b"".join(encode_line(e) for e in session.events)


@pytest.fixture
def file_size_limit() -> Iterator[None]:
    """Lets a test cap RLIMIT_FSIZE (writes past it fail with EFBIG instead of killing us)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


async def test_a_batch_cut_short_by_the_disk_is_truncated_back_and_written_whole_later(
    store: SessionStore, file_size_limit: None
) -> None:
    session = await store.create(make_header("session-inline"))
    session.append("turn/start", {"turn": 1})
    await store.flush(session)
    path = store.path(session.id)
    committed = path.stat().st_size
    session.append("user/message", {"id": "m", "role": "user", "content": [{"type": "text", "text": "x" * 4000}]})
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (committed + 100, hard))  # the batch lands part-way
    with pytest.raises(CheckpointError):
        await store.flush(session)
    assert path.stat().st_size == committed  # the partial batch was cut back
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, hard))
    await store.flush(session)  # the batch was kept queued: written once now
    assert path.read_bytes() == expected_file(session)
    await store.close(session)


async def test_bytes_past_the_committed_size_are_dropped_before_the_next_batch(store: SessionStore) -> None:
    session = await store.create(make_header("session-inline"))
    session.append("turn/start", {"turn": 1})
    await store.flush(session)
    path = store.path(session.id)
    with path.open("ab") as f:  # what an unobserved earlier write would have left
        f.write(b'{"type":"turn/start","seq":1,')
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    await store.flush(session)
    assert path.read_bytes() == expected_file(session)
    await store.close(session)


async def test_a_file_shorter_than_committed_fails_the_checkpoint_and_keeps_the_batch(store: SessionStore) -> None:
    session = await store.create(make_header("session-inline"))
    session.append("turn/start", {"turn": 1})
    await store.flush(session)
    path = store.path(session.id)
    size = path.stat().st_size
    os.truncate(path, size - 5)
    session.append("turn/end", {"turn": 1, "reason": {"kind": "completed"}})
    with pytest.raises(CheckpointError):
        await store.flush(session)
    assert path.stat().st_size == size - 5  # nothing written behind a shrunk file
    with pytest.raises(CheckpointError):
        await store.flush(session)  # still queued, still refused
    assert len(session.events) == 2
    await store.close(session)  # its final flush fails the same way: logged
