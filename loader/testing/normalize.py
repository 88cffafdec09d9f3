"""Flow normalization and its YAML form (SPEC §20.2): the bytes a snapshot stores.

Ids are random per run, so a stored flow names them by role and order instead: session ids become
`S1…` in walk order (the order of `sessions`); a message id becomes `<S>.M<n>`, numbered *per
receiving session* `<S>` in order of first appearance during a depth-first walk of the flow in key
order; any other UUID `U1…` likewise, flow-wide. Numbering per session keeps snapshot diffs local
(issue 10): one more message in one session renumbers only that session's messages, not every
message after it in the whole flow. Replacement
reaches inside every string value, so a tool result naming a child reads `S2` and a root id
`session-<uuid>` is replaced whole, never as `session-U1`. Tool call ids from transcripts are kept
verbatim, even when they happen to look like UUIDs. Keys are never rewritten.

Message ids are the values at the message-id positions of the projection (step `input` and
`claimedUnrun` entries of a session, and `notices` entries, whose receiver is `to`); the numbering
nevertheless counts every appearance, so a `send_message` result that names a message before the
child's step enters it gets the lower number within the child's sequence.

`dump_flow` is deterministic: identical input gives identical bytes (ruamel.yaml round-trip
dumper, block style, mappings and sequences indented by 2 with the dash at the parent key's column,
width 4096, insertion order kept, multi-line strings as literal blocks where YAML allows one, no
anchors or aliases even when the input shares objects).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

__all__ = ["dump_flow", "normalize"]

UUID_RE = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"


def normalize(flow: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a projected flow with ids replaced by placeholders (§20.2, issue 10)."""
    sessions = [s["id"] for s in flow.get("sessions", []) if isinstance(s.get("id"), str)]
    labels: dict[str, str] = {sid: f"S{i}" for i, sid in enumerate(sessions, start=1)}
    owners: dict[str, str] = {}  # message id -> the session whose inbox received it
    keep: set[str] = set()
    _collect(flow, owners, keep)
    counters: dict[str, int] = {"U": 0}

    def label(token: str) -> str:
        if token in labels:
            return labels[token]
        if token in keep:
            return token
        owner = owners.get(token)
        if owner is None:
            counters["U"] += 1
            labels[token] = f"U{counters['U']}"
        else:
            prefix = labels.get(owner, owner)
            counters[prefix] = counters.get(prefix, 0) + 1
            labels[token] = f"{prefix}.M{counters[prefix]}"
        return labels[token]

    known = sorted((set(labels) | set(owners)) - keep, key=lambda t: (-len(t), t))
    pattern = re.compile("|".join([*(re.escape(t) for t in known), UUID_RE]))

    def rewrite(value: str) -> str:
        if value in keep:
            return value
        return pattern.sub(lambda m: label(m.group(0)), value)

    normalized: dict[str, Any] = _map_strings(flow, rewrite)
    return normalized


def _collect(flow: dict[str, Any], owners: dict[str, str], keep: set[str]) -> None:
    for session in flow.get("sessions", []):
        sid = session.get("id", "")
        if session.get("spawnCall"):
            keep.add(session["spawnCall"])
        for turn in session.get("turns", []):
            for entry in turn.get("claimedUnrun", []):
                owners.setdefault(entry["id"], sid)
            for step in turn.get("steps", []):
                for entry in step.get("input", []):
                    owners.setdefault(entry["id"], sid)
                keep.update(call["id"] for call in step.get("output", {}).get("toolCalls", []))
                keep.update(tool["id"] for tool in step.get("tools", []))
    for notice in flow.get("notices", []):
        owners.setdefault(notice["id"], notice.get("to", ""))
    owners.pop("", None)
    keep.discard("")


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {key: _map_strings(item, fn) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_map_strings(item, fn) for item in value]
    return value


def _literal_blocks(value: Any) -> Any:
    """Plain containers with every multi-line string marked for the literal block style."""
    if isinstance(value, str):
        return LiteralScalarString(value) if "\n" in value else str(value)
    if isinstance(value, dict):
        return {str(key): _literal_blocks(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_literal_blocks(item) for item in value]
    return value


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.default_flow_style = False
    yaml.indent(mapping=2, sequence=2, offset=0)
    yaml.width = 4096
    yaml.allow_unicode = True
    yaml.representer.ignore_aliases = lambda *_args: True
    return yaml


def dump_flow(flow: Any) -> str:
    """The §20.2 YAML text of a normalized flow (a dict, or any object with a `data` dict)."""
    data = getattr(flow, "data", flow)
    if not isinstance(data, dict):
        raise TypeError(f"dump_flow needs a flow dict, got {type(flow).__name__}")
    out = io.StringIO()
    _yaml().dump(_literal_blocks(data), out)
    return out.getvalue()
