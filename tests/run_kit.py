"""Run a transcript through `run_tree` and keep one global timeline of what happened, in order.

A flow (§20) shows where each message landed, but not what happened *between* sessions: "no child
sends a request before root step 2 is claimed" or "the worker made no request between the
interrupt and D" need the interleaving. `run_timeline` runs the real tree (test profile, fences on,
the same composition as the pytest plugin) with `ReplayProvider` at the model seam, subclassed only
to note each request as it is made, and a `RunSinks.on_event` sink noting every committed log event
of every session. Both land in one list, so list order is the order the loop produced them.

Entries are `Entry(kind, agent, type, data)`: `kind` is `request` (type `turn.step`) or `event`;
`agent` is the transcript key the session is bound to (resolved after the run, so events written
before the binding still carry their key). The flow of the same run is returned alongside.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from home_kit import validate_home

from dsh.loader.config import compose
from dsh.loader.headless import RunRequest, RunResult, RunSinks, run_tree
from dsh.loader.models import ModelRequest, ReplayProvider
from dsh.loader.testing import Flow, normalize, project
from dsh.loader.transcripts import Transcript, load_transcript

BACKSTOP_SECONDS = 30.0


SCENARIOS = [
    "background-settlement",
    "notice-new-turn",
    "report-then-settle",
    "followups-checkpoint-failure",
    "interrupt-parked-resume",
    "four-children-one-step",
    "child-max-tokens",
]
"""The §21 catalogue, in the spec's order."""

@dataclass(frozen=True)
class Entry:
    kind: str  # "request" | "event"
    agent: str | None
    type: str
    data: dict[str, Any]

    def is_insert(self, kind: str | None = None) -> bool:
        """An inbox insert (of a message whose source kind is `kind`, when given)."""
        if self.type != "agent/inbox/spliced" or not self.data.get("inserted"):
            return False
        return kind is None or any(m.get("source", {}).get("kind") == kind for m in self.data["inserted"])

    def texts(self) -> list[str]:
        return [
            "\n".join(b.get("text", "") for b in m.get("content", []) if b.get("type") == "text")
            for m in self.data.get("inserted", [])
        ]


@dataclass
class Timeline:
    entries: list[Entry]
    result: RunResult
    flow: Flow
    keys: dict[str, str]  # live session id -> transcript agent key

    def inserts(self) -> list[tuple[str | None, str, str]]:
        """Every inserted message as (recipient key, source kind, text with session ids as keys),
        sorted: what was sent, wherever and whenever it landed."""
        out = []
        for e in self.entries:
            if not e.is_insert():
                continue
            for m, text in zip(e.data["inserted"], e.texts()):
                for sid, key in self.keys.items():
                    text = text.replace(sid, f"<{key}>")
                out.append((e.agent, m.get("source", {}).get("kind", ""), text))
        return sorted(out, key=repr)

    def canceled(self) -> list[Entry]:
        """Splices that discarded messages (cancel clears the inbox with outcome `canceled`)."""
        return [e for e in self.entries if e.type == "agent/inbox/spliced" and e.data.get("outcome") == "canceled"]

    def index(self, agent: str, type_: str, **match: Any) -> int:
        """Position of the first entry of `agent` with this type whose data has these values."""
        for i, e in enumerate(self.entries):
            if e.agent == agent and e.type == type_ and all(e.data.get(k) == v for k, v in match.items()):
                return i
        raise AssertionError(f"no {type_} {match} of {agent} in the timeline")

    def requests(self, agent: str | None = None) -> list[tuple[int, Entry]]:
        return [(i, e) for i, e in enumerate(self.entries) if e.kind == "request" and (agent is None or e.agent == agent)]

    def between(self, start: int, end: int) -> list[Entry]:
        return self.entries[start + 1:end]


class _TimelineReplay(ReplayProvider):
    """The real replay provider; each request is noted in the shared timeline when it is made."""

    def __init__(self, transcript: Transcript, raw: list[tuple[str, str | None, str, dict[str, Any]]]) -> None:
        super().__init__(transcript)
        self._raw = raw

    def stream(self, request: ModelRequest, signal: Any, on_retry: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        self._raw.append(("request", request.session_id, f"{request.turn}.{request.step}",
                          {"turn": request.turn, "step": request.step}))
        return super().stream(request, signal, on_retry)


async def run_timeline(transcript: str | Path, home: Path, *, overlays: Sequence[str] = ()) -> Timeline:
    script = load_transcript(transcript)
    composed = compose(profile="test", overlays=list(overlays), transcript=script, environ={}, pytest_plugin=True)
    raw: list[tuple[str, str | None, str, dict[str, Any]]] = []
    provider = _TimelineReplay(script, raw)
    sinks = RunSinks(on_event=lambda sid, event: raw.append(("event", sid, event["type"], event["data"])))
    request = RunRequest(home=home, config=composed.config, transcript=script, provider=provider,
                         fences_allowed=True, sinks=sinks)
    result = await asyncio.wait_for(run_tree(request), BACKSTOP_SECONDS)
    validate_home(home)
    entries = [Entry(kind, provider.agent_key_of(sid) if sid else None, type_, data) for kind, sid, type_, data in raw]
    flow = Flow(normalize(project(home, result.root_session_id, result, result.violations, script.spec.name)))
    keys = {sid: key for _, sid, _, _ in raw if sid and (key := provider.agent_key_of(sid)) is not None}
    return Timeline(entries=entries, result=result, flow=flow, keys=keys)


def write_transcript(directory: Path, name: str, agents: dict[str, Any], *, fences: list[Any] | None = None,
                     task: str = "go", **extra: Any) -> Path:
    """A transcript file under `directory` (JSON is YAML); returns its path."""
    doc: dict[str, Any] = {"version": 1, "name": name, "task": task, **extra}
    if fences:
        doc["fences"] = fences
    doc["agents"] = agents
    path = directory / f"{name}.yaml"
    path.write_text(json.dumps(doc, indent=1))
    return path
