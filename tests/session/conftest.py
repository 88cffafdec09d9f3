"""Store fixtures: every store a test makes has its live sessions validated and closed at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.session import SessionStore, validate_log

MakeStore = Callable[..., SessionStore]


@pytest.fixture
async def make_store(tmp_path: Path) -> AsyncIterator[MakeStore]:
    stores: list[SessionStore] = []

    def make(**kw: Any) -> SessionStore:
        kw.setdefault("batch_delay_ms", 0)
        kw.setdefault("fsync", False)
        store = SessionStore(tmp_path / "home", **kw)
        stores.append(store)
        return store

    yield make
    for store in stores:
        if not store.sessions_dir.exists():
            continue
        for entry in sorted(store.sessions_dir.iterdir()):
            session = store.get_live(entry.name)
            if session is not None:
                validate_log(session.events)
                await store.close(session)


@pytest.fixture
def store(make_store: MakeStore) -> SessionStore:
    return make_store()
