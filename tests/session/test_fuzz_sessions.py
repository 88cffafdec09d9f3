"""Fuzzing session JSONL lines and files (issue 15 items 3, 7), in-process against the real store.

Each example takes the good log of `hostile_kit` and damages it: one field of one event set to a
random JSON value, one line replaced by random JSON or bytes, or the file cut anywhere. Invariants:
`read` and `SessionStore.load` raise nothing but `SessionError`; a refused file is byte for byte
unchanged (load validates before any truncate or append); a load that succeeds leaves a log that
`validate_log` accepts. 300 examples under the `ci` profile, 10,000 under `fuzz` (scripts/fuzz.sh).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
import fuzz_kit  # noqa: E402,F401  (registers and loads the settings profiles)
from hostile_kit import SID, good_events, header, sha  # noqa: E402

from dsh.loader.errors import SessionError
from dsh.loader.session import SessionStore, read, validate_log

_json = st.recursive(  # small values; lists and objects as likely as scalars
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["", "x", "c1", "m1", "completed", "next-turn"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["id", "role", "content", "type", "kind", "text", "turn", "step"]), inner, max_size=3),
    max_leaves=8,
)
_FIELDS = ["turn", "step", "reason", "content", "callId", "message", "inserted", "removedCount", "start",
           "target", "id", "role", "error", "outcome", "name"]


@st.composite
def damaged_files(draw: st.DrawFn) -> bytes:
    events = good_events()
    lines = [json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in [header(SID), *events]]
    how = draw(st.sampled_from(["field", "field", "field", "line", "bytes", "cut"]))
    if how == "field":
        for _ in range(draw(st.integers(1, 3))):  # one to three fields, mostly ones the event has
            i = draw(st.integers(0, len(events) - 1))
            data = events[i]["data"]
            key = draw(st.one_of(st.sampled_from(sorted(data) or _FIELDS), st.sampled_from(_FIELDS)))
            if key in data and not draw(st.integers(0, 3)):
                del data[key]
            else:
                data[key] = draw(_json)
        if draw(st.booleans()):  # leave the turn open, so a load would build and append closers
            events = events[: draw(st.integers(1, len(events) - 1))]
        lines = [json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in [header(SID), *events]]
    elif how == "line":
        i = draw(st.integers(1, len(lines) - 1))
        event = {"type": events[i - 1]["type"], "seq": i - 1, "time": 1, "data": draw(_json)}
        lines[i] = json.dumps(event).encode() + b"\n"
    elif how == "bytes":
        lines[draw(st.integers(1, len(lines) - 1))] = draw(st.binary(max_size=40)) + b"\n"
    raw = b"".join(lines)
    if how == "cut":
        raw = raw[: draw(st.integers(len(lines[0]), len(raw)))]
    return raw


def _load(home: Path) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        store = SessionStore(home, batch_delay_ms=0, fsync=False, inline_io=True)
        session = await store.load(SID)
        await store.close(session)
        return session.events

    return asyncio.run(go())


@given(raw=damaged_files())
def test_damaged_session_files_are_refused_cleanly_or_load_valid(tmp_path_factory: Any, raw: bytes) -> None:
    home = tmp_path_factory.mktemp("fz")
    path = home / "sessions" / SID / "session.jsonl"
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(raw)
    before = sha(path)

    try:
        read(path)
    except SessionError:
        pass
    try:
        events = _load(home)
    except SessionError:
        assert sha(path) == before, "a refused file was written"
    else:
        validate_log(events)
        validate_log(read(path).events)
