"""What a caller observes of a run (SPEC §17.3, issue 16 item 2): the sinks the CLI turns `--json`,
TTY progress and warnings into, and the ledgers the run result is built from.

`RunSinks.records` is the `--json` stream (`loader.ndjson.RecordStream`): every durable event of
every session of the tree, the lifecycle edges, one `retry` record per `llm/retry` event and a
`waiting` record per stall. The ledgers watch the same events, so the result's usage and turn counts
are this run's own: the events a session appended while this process ran it, whether the session
is new or resumed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsh.loader.agent import Agent
from dsh.loader.ndjson import RecordStream, parked_entry, record, retry_record
from dsh.loader.tree import Tree

__all__ = ["ChildLedger", "RunSinks", "UsageLedger", "attach_sinks", "label_of", "waiting_entries"]


@dataclass
class RunSinks:
    """What a caller observes of a run; the CLI turns `--json`, TTY progress and warnings into these."""

    on_event: Callable[[str, dict[str, Any]], None] | None = None
    on_lifecycle: Callable[[dict[str, Any]], None] | None = None
    on_progress: Callable[[str], None] | None = None
    on_warning: Callable[[str], None] | None = None
    on_started: Callable[[str], None] | None = None
    # The live TTY tree (issue 11): each agent's header as the tree creates or resumes it (before
    # its first event), and the parked entries of each stall (those of the `waiting` record).
    on_agent: Callable[[str, dict[str, Any]], None] | None = None
    on_waiting: Callable[[list[dict[str, Any]]], None] | None = None
    records: RecordStream | None = None  # `--json`: the versioned NDJSON records (loader.ndjson)


def _zero_usage() -> dict[str, int]:
    return {"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0}


class UsageLedger:
    """Per-session usage and root-turn counts of this run, from the events each session appends.

    Every agent the tree creates is watched from before it runs (an agent hook), so one-shot
    children, background children and resumed sessions all count; nothing appended before this
    run (a resumed log's history) does."""

    def __init__(self, tree: Tree) -> None:
        self.usage: dict[str, dict[str, int]] = {}
        self.turns: dict[str, int] = {}
        tree.agent_hooks.append(self._watch)

    def _watch(self, agent: Agent) -> None:
        sid = agent.id
        self.usage.setdefault(sid, _zero_usage())
        self.turns.setdefault(sid, 0)
        agent.session.subscribe(lambda event: self._note(sid, event))

    def _note(self, sid: str, event: dict[str, Any]) -> None:
        if event["type"] == "turn/start":
            self.turns[sid] = self.turns.get(sid, 0) + 1
        elif event["type"] == "assistant/message":
            totals = self.usage.setdefault(sid, _zero_usage())
            for key, value in (event["data"].get("usage") or {}).items():
                if isinstance(value, int) and not isinstance(value, bool):
                    totals[key] = totals.get(key, 0) + value

    def of(self, session_id: str) -> dict[str, int]:
        return dict(self.usage.get(session_id) or _zero_usage())

    def total(self) -> dict[str, int]:
        out = _zero_usage()
        for usage in self.usage.values():
            for key, value in usage.items():
                out[key] = out.get(key, 0) + value
        return out


class ChildLedger:
    """Children seen during the run, for the result's `subagents` list (§17.1 step 3)."""

    def __init__(self, tree: Tree) -> None:
        self.rows: dict[str, dict[str, Any]] = {}
        self.released: set[str] = set()
        self.tree = tree
        tree.manager.events.on("subagent/start", self._start)
        tree.manager.events.on("subagent/end", self._end)

    def _start(self, edge: dict[str, Any]) -> None:
        row = self.rows.setdefault(edge["sessionId"], {
            "sessionId": edge["sessionId"], "parentSessionId": edge["parentSessionId"],
            "label": label_of(self.tree, edge["sessionId"]), "epochs": 0, "lastStopReason": None,
        })
        row["epochs"] = max(row["epochs"], int(edge["epoch"]))

    def _end(self, edge: dict[str, Any]) -> None:
        if edge["sessionId"] in self.rows:
            self.rows[edge["sessionId"]]["lastStopReason"] = edge["stopReason"]

    def summary(self, usage: UsageLedger) -> list[dict[str, Any]]:
        return [{**row, "usage": usage.of(sid), "numTurns": usage.turns.get(sid, 0)} for sid, row in self.rows.items()]


def label_of(tree: Tree, session_id: str) -> str:
    agent = tree.registry.get(session_id)
    if agent is None:
        return ""
    for event in agent.session.events:
        if event["type"] == "subagent/descriptor":
            return str(event["data"].get("label", ""))
    return ""


def waiting_entries(tree: Tree, parked_ids: list[str], home: Path) -> list[dict[str, Any]]:
    """The parked subagents of a stall, each with the `<parent>/<child>` address `dsh send` takes
    (the direct parent: only it may message the child, SPEC §12.2)."""
    entries = []
    for child_id in parked_ids:
        activation = tree.manager.activations.get(child_id)
        parent = activation.parent_session if activation is not None else ""
        entries.append(parked_entry(child_id, parent, label_of(tree, child_id), home))
    return entries


def attach_sinks(tree: Tree, sinks: RunSinks) -> None:
    records = sinks.records
    if sinks.on_agent is not None:
        on_agent = sinks.on_agent
        tree.agent_hooks.append(lambda agent: on_agent(agent.id, dict(agent.header)))
    if sinks.on_event is not None or records is not None:
        on_event = sinks.on_event

        def attach(agent: Agent) -> None:
            sid = agent.id

            def forward(event: dict[str, Any]) -> None:
                if on_event is not None:
                    on_event(sid, event)
                if records is not None:
                    records.emit(record("event", sessionId=sid, event=event))
                    if event["type"] == "llm/retry":
                        records.emit(retry_record(sid, event["data"]))

            agent.session.subscribe(forward)

        tree.agent_hooks.append(attach)
    if sinks.on_lifecycle is not None or records is not None:
        on_lifecycle = sinks.on_lifecycle

        def edge(name: str) -> Callable[[dict[str, Any]], None]:
            def forward(payload: dict[str, Any]) -> None:
                fields = {k: v for k, v in payload.items() if k != "output"}
                if on_lifecycle is not None:
                    on_lifecycle({"type": "lifecycle", "name": name, **fields})
                if records is not None:
                    records.emit(record("lifecycle", name=name, **fields))

            return forward

        tree.manager.events.on("subagent/start", edge("subagent/start"))
        tree.manager.events.on("subagent/end", edge("subagent/end"))
    if sinks.on_progress is not None:
        progress = sinks.on_progress

        def watch(agent: Agent) -> None:
            label = "root" if agent.header.get("parentSession") is None else agent.id[:8]

            def on_event(event: dict[str, Any]) -> None:
                nonlocal label
                if event["type"] == "subagent/descriptor":
                    label = str(event["data"].get("label") or label)
                elif event["type"] == "turn/start":
                    progress(f"[{label}] turn {event['data']['turn']} started")

            agent.session.subscribe(on_event)

        tree.agent_hooks.append(watch)
        tree.manager.events.on(
            "subagent/end", lambda e: progress(f"[{label_of(tree, e['sessionId']) or e['sessionId'][:8]}] settled: {e['stopReason']}")
        )
