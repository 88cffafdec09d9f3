"""What the model saw (issue 11 item 1): a digest per model request, each full value stored once.

Every model request appends, inside its step and before the model-request checkpoint (§5.5), so
the record is durable before the provider is called:

- `llm/system {hash, text}` the first time this session's log meets that system prompt;
- `llm/tools {hash, tools}` the first time it meets that tool list (`[{name, description,
  parameters}]`, in request order);
- `llm/request {turn, step, model, messageCount, systemHash, toolNames, toolsHash}`, always.

All three are written with `"ignorable": true`: a reader that predates them skips them (§5.1), so
an older dsh still loads and resumes a log written by this one. This version knows them, so
`validate_log` checks their shapes and two relations: a hash is defined at most once per log, and a
request names only hashes defined before it (writes are in order, so a torn tail cannot break that).

A hash is the first 16 hex digits of SHA-256: of the UTF-8 text for a system prompt, of the compact
key-sorted JSON for a tool list. They only key values within one session's log, so 64 bits is plenty.
Nothing here is model-visible (`derive_messages` ignores these types) and the flow projection skips
them, so replay flows do not change. Stdlib only.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dsh.loader.session._codec import _encode
from dsh.loader.session.shaped import encode_string

if TYPE_CHECKING:
    from dsh.loader.session.session import Session

__all__ = [
    "REQUEST_EVENT_TYPES",
    "LoggedRequest",
    "RequestLog",
    "logged_requests",
    "request_problem",
    "system_hash",
    "tools_hash",
]

REQUEST, SYSTEM, TOOLS = "llm/request", "llm/system", "llm/tools"
REQUEST_EVENT_TYPES = frozenset({REQUEST, SYSTEM, TOOLS})
_DEFINES = {SYSTEM: ("system", "text"), TOOLS: ("tools", "tools")}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def system_hash(text: str) -> str:
    return _digest(text.encode("utf-8", "surrogatepass"))


def tools_hash(tools: list[dict[str, Any]]) -> str:
    return _digest(json.dumps(tools, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii"))


_Shared = tuple[list[dict[str, Any]], str, str]
_SHARED_TOOLS: dict[tuple[Any, ...], _Shared] = {}
_SHARED_TOOLS_MAX = 64
_SHARED_SYSTEM: dict[str, tuple[str, str]] = {}  # prompt -> (hash, event data text); bounded as above


def _data_text(data: dict[str, Any]) -> str:
    """The JSON text `Session.append` writes for `data` (`session._encode`), made once per value
    for all sessions (issue 13: the `llm/tools` and `llm/system` data of a fan-out's children are
    one value, half of the run's log bytes); the events then share it (`append_encoded`)."""
    return _encode(data)


def _shared_system(text: str) -> tuple[str, str]:
    """`system_hash` and the `llm/system` data text, once per prompt for all sessions (issue 13:
    every child hashed and encoded the same one)."""
    entry = _SHARED_SYSTEM.get(text)
    if entry is None:
        digest = system_hash(text)
        if len(_SHARED_SYSTEM) >= _SHARED_TOOLS_MAX:
            _SHARED_SYSTEM.clear()
        entry = _SHARED_SYSTEM[text] = (digest, _data_text({"hash": digest, "text": text}))
    return entry


def _shared_tools(tools: list[dict[str, Any]]) -> _Shared:
    """A JSON copy of `tools`, `tools_hash(tools)` and the `llm/tools` data text of that copy,
    computed once per tool list for all sessions
    (issue 13: every child of a fan-out hashed the same schemas, ~1.5% of the run, and copied them
    into its `llm/tools` event). Keyed by the lists' names, descriptions and the identity of their
    parameter schemas (`loop._schema` hands out one cached dict per model); a hit still compares
    the lists with the stored copy, so a schema mutated in between gets its own entry.

    The copy is what `Session.append` would have decoded (`json.loads(json.dumps(...))` normalises
    tuples and keys alike); the `llm/tools` events of all sessions share it, read-only as every
    log's data is, so no log holds the live schema dicts."""
    key = tuple((t.get("name"), t.get("description"), id(t.get("parameters"))) for t in tools)
    hit = _SHARED_TOOLS.get(key)
    if hit is not None and hit[0] == tools:
        return hit
    digest = tools_hash(tools)
    if len(_SHARED_TOOLS) >= _SHARED_TOOLS_MAX:
        _SHARED_TOOLS.clear()
    copy = json.loads(json.dumps(tools))  # later mutation cannot match
    entry = _SHARED_TOOLS[key] = (copy, digest, _data_text({"hash": digest, "tools": copy}))
    return entry


class RequestLog:
    """Writes the digest of each request of one session and remembers which values its log holds.

    Invariant: `_known` is the set of `(kind, hash)` defined by `session.events[:_scanned]`; it is
    caught up before each record, so a resumed log (whose definitions came from the file) and
    events appended by others are both accounted for."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._known: set[tuple[str, str]] = set()
        self._scanned = 0
        self._last_system: tuple[str, str, str] | None = None  # (prompt, hash, data text): rarely changes
        # (the request's list, shared, its names, their JSON text or None when a name is not a str)
        self._last_tools: tuple[list[dict[str, Any]], _Shared, list[Any], str | None] | None = None

    def record(
        self, *, turn: int, step: int, model: str, system: str, tools: list[dict[str, Any]], message_count: int
    ) -> dict[str, Any]:
        """Append the definitions this log lacks, then the digest; returns the digest's data.

        A plain `def`: the appends are one sync span, so no other append lands between a
        definition and the request that names it."""
        events = self._session.events
        for index in range(self._scanned, len(events)):  # by index: no copy of the log's tail
            event = events[index]
            if event["type"] not in _DEFINES:  # most events: one set-like lookup (issue 13)
                continue
            kind = _DEFINES[event["type"]]
            if isinstance(event["data"].get("hash"), str):
                self._known.add((kind[0], event["data"]["hash"]))
        self._scanned = len(events)
        if self._last_system is None or self._last_system[0] != system:
            self._last_system = (system, *_shared_system(system))
        if self._last_tools is None or self._last_tools[0] != tools:
            names: list[Any] = [t.get("name") for t in tools]
            names_text = ",".join(map(encode_string, names)) if all(n.__class__ is str for n in names) else None
            self._last_tools = (tools, _shared_tools(tools), names, names_text)
        s_hash, s_text = self._last_system[1], self._last_system[2]
        (t_copy, t_hash, t_text), names, names_text = self._last_tools[1], self._last_tools[2], self._last_tools[3]
        if ("system", s_hash) not in self._known:
            # A str is immutable: the event may hold the prompt itself; its text is shared.
            self._session.append_encoded(SYSTEM, {"hash": s_hash, "text": system}, s_text, ignorable=True)
            self._known.add(("system", s_hash))
        if ("tools", t_hash) not in self._known:
            self._session.append_encoded(TOOLS, {"hash": t_hash, "tools": t_copy}, t_text, ignorable=True)
            self._known.add(("tools", t_hash))
        data: dict[str, Any] = {
            "turn": turn, "step": step, "model": model, "messageCount": message_count,
            "systemHash": s_hash, "toolNames": names, "toolsHash": t_hash,  # the names: read-only, shared
        }
        if names_text is not None and model.__class__ is str and (
                turn.__class__ is int and step.__class__ is int and message_count.__class__ is int):
            # issue 13: `_encode(data)`, formatted (the hashes are hex digits); pinned by test_requests
            text = (f'{{"turn":{turn},"step":{step},"model":{encode_string(model)},"messageCount":{message_count},'
                    f'"systemHash":"{s_hash}","toolNames":[{names_text}],"toolsHash":"{t_hash}"}}')
            self._session.append_encoded(REQUEST, data, text, ignorable=True)
        else:
            self._session.append_owned(REQUEST, data, ignorable=True)
        self._scanned = len(events)
        return data


@dataclass(frozen=True)
class LoggedRequest:
    """One `llm/request` of a log with the values it names (None when the log lacks them)."""

    seq: int
    digest: dict[str, Any]
    system: str | None
    tools: list[dict[str, Any]] | None


def logged_requests(events: list[dict[str, Any]]) -> Iterator[LoggedRequest]:
    """Every request of a log in order, its hashes resolved against the definitions before it."""
    values: dict[tuple[str, str], Any] = {}
    for event in events:
        kind, data = event["type"], event["data"]
        if kind in _DEFINES:
            name, field = _DEFINES[kind]
            values[(name, data.get("hash"))] = data.get(field)
        elif kind == REQUEST:
            yield LoggedRequest(event["seq"], data, values.get(("system", data.get("systemHash"))),
                                values.get(("tools", data.get("toolsHash"))))


def request_problem(kind: str, data: dict[str, Any], defined: set[tuple[str, str]]) -> str | None:
    """The shape or relation problem of one request-log event, or None; `defined` holds the
    `(kind, hash)` pairs defined earlier in the log and gains this event's definition."""
    if kind in _DEFINES:
        name, field = _DEFINES[kind]
        if not isinstance(data.get("hash"), str):
            return "data.hash is not a string"
        ok = isinstance(data.get(field), str) if name == "system" else _is_tool_list(data.get(field))
        if not ok:
            return f"data.{field} is not a {'string' if name == 'system' else 'list of tools'}"
        if (name, data["hash"]) in defined:
            return f"{kind} {data['hash']} is defined twice"
        defined.add((name, data["hash"]))
        return None
    if not isinstance(data.get("model"), str):
        return "data.model is not a string"
    if type(data.get("messageCount")) is not int:
        return "data.messageCount is not an integer"
    names = data.get("toolNames")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "data.toolNames is not a list of strings"
    for name, field in (("system", "systemHash"), ("tools", "toolsHash")):
        if not isinstance(data.get(field), str):
            return f"data.{field} is not a string"
        if (name, data[field]) not in defined:
            return f"data.{field} {data[field]} is not defined before the request"
    return None


def _is_tool_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in value)
