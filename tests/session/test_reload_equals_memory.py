"""What a session holds in memory is what a reload of its file gives (issue 13, `append_owned`).

The runtime appends the events it builds itself without the decoded copy (`Session.append_owned`);
external data still goes through the copy. Either way, after a real run every event a session
published must equal, by value, the event the store reads back from disk: same data, lists where
the runtime held lists, str keys only. The run also catches an owned dict changed after its append
(the log on disk would then differ from memory).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from run_kit import SCENARIOS

from dsh.loader.config import compose
from dsh.loader.headless import RunRequest, RunSinks, run_tree
from dsh.loader.models import ModelRequest, ReplayProvider
from dsh.loader.session import EVENT_TYPES, SessionStore
from dsh.loader.transcripts import load_transcript

TRANSCRIPTS = Path(__file__).resolve().parents[2] / "transcripts"

OWNED_TYPES = {"turn/start", "step/start", "step/end", "turn/end", "llm/request", "llm/retry", "llm/system", "llm/tools",
               "agent/inbox/spliced", "subagent/epoch"}
"""Types with an `append_owned` call site (the splice's removals, the epoch marker among them)."""


class _RetryingReplay(ReplayProvider):
    """The real replay; the first request of each session reports one retry first (an `llm/retry`)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._retried: set[str] = set()

    def stream(self, request: ModelRequest, signal: Any, on_retry: Any) -> Any:  # type: ignore[override]
        if request.session_id not in self._retried:
            self._retried.add(request.session_id)
            on_retry(1, 0, "RATE_LIMITED", 429)
        return super().stream(request, signal, on_retry)


async def _run(name: str, home: Path) -> dict[str, list[dict[str, Any]]]:
    script = load_transcript(TRANSCRIPTS / f"{name}.yaml")
    composed = compose(profile="test", overlays=[], transcript=script, environ={}, pytest_plugin=True)
    seen: dict[str, list[dict[str, Any]]] = {}
    sinks = RunSinks(on_event=lambda sid, event: seen.setdefault(sid, []).append(event))
    request = RunRequest(home=home, config=composed.config, transcript=script,
                         provider=_RetryingReplay(script), fences_allowed=True, sinks=sinks)
    await asyncio.wait_for(run_tree(request), 30)
    return seen


async def test_every_published_event_equals_its_reloaded_line(tmp_path: Path) -> None:
    """Every scenario (and hello), with one retry per session: each event a session published equals
    its line read back; the runs reach every `append_owned` call site's type and the copied ones."""
    types: set[str] = set()
    for name in [*SCENARIOS, "hello"]:
        home = tmp_path / name
        home.mkdir()
        seen = await _run(name, home)
        store = SessionStore(home)
        for sid, events in seen.items():
            on_disk = store.read(sid).events
            assert len(on_disk) >= len(events) > 0, (name, sid)
            for event in events:
                assert on_disk[event["seq"]] == event, (name, sid, event["type"])
                types.add(event["type"])
    assert OWNED_TYPES <= types
    assert {"user/message", "assistant/message", "tool/call", "tool/result", "subagent/descriptor"} <= types
    assert types - EVENT_TYPES <= {"subagent/epoch"}
