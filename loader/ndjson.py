"""The `dsh run --json` record contract (issue 16 item 2): every record has `type` and the schema
`version`; the JSON Schema of all records ships as package data (`schemas/run-ndjson.schema.json`).

Stream order, which `RecordStream` enforces: one `init` record first (records produced before it,
such as the root's first events, wait in a buffer until it is out), then `event`, `lifecycle`,
`retry` and `waiting` records as they happen, and one `result` record last. The records carry no
secret: `init` names the base URL's host only, never a key, header or full URL.

Bump SCHEMA_VERSION only for a change a reader must know about (a removed or retyped field); adding
a property is not one, since readers ignore properties they do not know.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "SCHEMA_RESOURCE",
    "SCHEMA_VERSION",
    "RecordStream",
    "base_url_host",
    "dsh_version",
    "load_schema",
    "parked_entry",
    "record",
    "retry_record",
]

SCHEMA_VERSION = 1
SCHEMA_RESOURCE = "schemas/run-ndjson.schema.json"


def load_schema() -> dict[str, Any]:
    """The shipped JSON Schema (draft 2020-12) of every `--json` record, read as package data."""
    text = resources.files(__package__ or "loader").joinpath(SCHEMA_RESOURCE).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def record(kind: str, **fields: Any) -> dict[str, Any]:
    """A record of `kind`: `type` and `version` first, so a reader can branch before parsing on."""
    return {"type": kind, "version": SCHEMA_VERSION, **fields}


def dsh_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh")
    except PackageNotFoundError:  # a source checkout that was never installed
        return "0+unknown"


def base_url_host(url: str) -> str | None:
    """`host[:port]` of a base URL: no scheme, path, query or credentials (a URL may carry a user
    and password, which must not reach a log a CI job keeps)."""
    parts = urlsplit(url)
    if parts.hostname is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return host if parts.port is None else f"{host}:{parts.port}"


def retry_record(session_id: str, data: dict[str, Any]) -> dict[str, Any]:
    """The `retry` record of an `llm/retry` event (the provider's on_retry hook logs one per retry)."""
    return record(
        "retry", sessionId=session_id, turn=data.get("turn"), step=data.get("step"), attempt=data.get("attempt"),
        code=data.get("code"), status=data.get("status"), delayMs=data.get("delayMs"),
    )


def parked_entry(session_id: str, parent_id: str, label: str, home: Path, engine: str | None = None) -> dict[str, Any]:
    """One parked subagent of a `waiting` record: its address and the command that resumes it
    (with `--engine temporal` for a Temporal tree: it serves no socket to find)."""
    address = f"{parent_id}/{session_id}"
    send = f"dsh send {shlex.quote(address)} MESSAGE --home {shlex.quote(str(home))}"
    if engine is not None:
        send += f" --engine {engine}"
    return {"sessionId": session_id, "parentSessionId": parent_id, "label": label, "address": address, "send": send}


class RecordStream:
    """Orders records for one run: nothing goes out before `init`, and `result` closes the stream.

    Records that arrive first (the root's creation events, a resumed tree's repairs) are buffered
    and follow `init` in their own order."""

    def __init__(self, write: Callable[[dict[str, Any]], None]) -> None:
        self._write = write
        self._pending: list[dict[str, Any]] | None = []  # None once `init` is out
        self.closed = False

    def emit(self, rec: dict[str, Any]) -> None:
        if self.closed:
            return  # a late event after the result would break "result last"
        if self._pending is not None:
            self._pending.append(rec)
            return
        self._write(rec)

    def init(self, rec: dict[str, Any]) -> None:
        pending, self._pending = self._pending or [], None
        self._write(rec)
        for queued in pending:
            self._write(queued)

    def result(self, rec: dict[str, Any]) -> None:
        """The last record. `run_tree` emits `init` before it can return a result, so records are
        never pending here; were they, they go out before the result rather than being lost."""
        for queued in self._pending or []:
            self._write(queued)
        self._pending = None
        self._write(rec)
        self.closed = True
