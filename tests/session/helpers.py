"""Builders and I/O doubles for the session tests.

`FailingIO` and `GateIO` subclass the real `FileIO` and override only `write`: the store's own
truncate-back logic (`append_batch`) runs unchanged, which is what the failure tests must prove.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from dsh.loader.session import Event, FileIO, make_header


def build_log(*items: tuple[Any, ...], start_time: int = 1000) -> list[Event]:
    """`(type, data)` or `(type, data, {extra envelope keys})` → contiguous events."""
    events: list[Event] = []
    for seq, item in enumerate(items):
        event: Event = {"type": item[0], "seq": seq, "time": start_time + seq, "data": item[1]}
        if len(item) > 2:
            event.update(item[2])
        events.append(event)
    return events


def line(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"


def write_session_file(path: Path, events: list[Event], *, header: dict[str, Any] | None = None,
                       tail: bytes = b"") -> bytes:
    """Write a session file by hand (as a crashed run would have left it); returns its bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = header if header is not None else make_header(path.parent.name, created_at=1)
    raw = line(header) + b"".join(line(e) for e in events) + tail
    path.write_bytes(raw)
    return raw


def file_events(path: Path) -> list[Event]:
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"", "file must end with a newline"
    return [json.loads(raw) for raw in lines[1:-1]]


def assistant_with_calls(turn: int, step: int, *call_ids: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": "working"}]
    content += [{"type": "tool-call", "id": cid, "name": "echo", "arguments": "{}"} for cid in call_ids]
    message = {"id": f"a-{turn}-{step}", "role": "assistant", "content": content,
               "source": {"kind": "model", "provider": "replay", "model": "m"}}
    return {"turn": turn, "step": step, "message": message, "finish": "tool-calls"}


class FailingIO(FileIO):
    """Fail the next `fail_next` writes, after writing `partial` bytes of the batch when > 0."""

    def __init__(self, fail_next: int = 0, partial: int = 0) -> None:
        self.fail_next = fail_next
        self.partial = partial
        self.attempts: list[bytes] = []
        self.written: list[bytes] = []
        self.wrote = threading.Event()  # set after each successful write
        self.truncated = threading.Event()

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        self.attempts.append(data)
        if self.fail_next > 0:
            self.fail_next -= 1
            if self.partial:
                super().write(path, data[: self.partial], fsync)
            raise OSError(28, "No space left on device (injected)")
        super().write(path, data, fsync)
        self.written.append(data)
        self.wrote.set()

    def truncate(self, path: Path, size: int, fsync: bool) -> None:
        super().truncate(path, size, fsync)
        self.truncated.set()


class GateIO(FileIO):
    """Block each write until `gate` is set; record concurrency (must never exceed 1 per file)."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.written: list[bytes] = []
        self.max_concurrent = 0
        self._active = 0
        self._lock = threading.Lock()

    def write(self, path: Path, data: bytes, fsync: bool) -> None:
        with self._lock:
            self._active += 1
            self.max_concurrent = max(self.max_concurrent, self._active)
        try:
            self.entered.set()
            assert self.gate.wait(5), "gate never opened"
            super().write(path, data, fsync)
            self.written.append(data)
        finally:
            with self._lock:
                self._active -= 1
