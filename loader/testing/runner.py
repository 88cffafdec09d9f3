"""Running a transcript into a normalized flow (SPEC §20.3), without pytest or syrupy.

The pytest plugin and `dsh flow` share this path, so a snapshot and the CLI print the same YAML
(§23 item 114). A run happens in a home the caller provides (the plugin passes a fresh temporary
directory) under the test profile's settings: no write-behind delay, no fsync, fences allowed.

`run_tree`'s keyword set is still growing (overlays, profiles), so the call is built from its
signature: a feature the runner does not accept yet is not passed, and asking for overlays it cannot
apply is an error rather than a silently different run.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from loader.session import read, validate_log
from loader.testing.flow import project
from loader.testing.normalize import dump_flow, normalize

__all__ = ["Flow", "TranscriptViolation", "arun_flow"]


class Flow:
    """A normalized flow. `flow == snapshot` defers to syrupy (our `__eq__` returns NotImplemented
    for anything that is not a flow), which serializes `data` with the §20.2 dump."""

    __slots__ = ("data",)
    __hash__ = None  # type: ignore[assignment]  # mutable data: equality without hashing

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    @property
    def yaml(self) -> str:
        return dump_flow(self.data)

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Flow):
            return self.data == other.data
        if isinstance(other, dict):
            return self.data == other
        return NotImplemented

    def __repr__(self) -> str:
        return f"Flow(transcript={self.data.get('transcript')!r})"


class TranscriptViolation(AssertionError):
    """The run broke its transcript's contract (§15.4, §16): the flow is kept for inspection.

    An `AssertionError`, so pytest reports it as a test failure, not an error in the fixture."""

    def __init__(self, flow: Flow, violations: list[dict[str, Any]]) -> None:
        self.flow = flow
        self.violations = violations
        lines = "\n".join(
            f"  {v.get('code')}" + (f" [{v.get('agent')}]" if v.get("agent") else "") + f": {v.get('message', '')}"
            for v in violations
        )
        super().__init__(f"transcript {flow.data.get('transcript')!r} had violations:\n{lines}")


async def arun_flow(
    transcript: str | Path,
    *,
    home: Path,
    overlays: Sequence[str] = (),
    timeout: float = 60,
) -> Flow:
    """Run `transcript` in `home`, project and normalize its flow; raise `TranscriptViolation` on
    any violation and `TimeoutError` when the run outlives `timeout` seconds."""
    from loader.headless import run_tree  # testing sits on headless; imported when a run starts
    from loader.transcripts import load_transcript

    script = load_transcript(transcript)
    params = inspect.signature(run_tree).parameters
    kwargs: dict[str, Any] = {"transcript": script, "home": home}
    wanted: dict[str, Any] = {
        "batch_delay_ms": 0, "fsync": False, "fences_allowed": True, "profile": "test",
    }
    kwargs.update({name: value for name, value in wanted.items() if name in params})
    if overlays:
        if "overlays" not in params:
            raise NotImplementedError("this run_tree does not accept overlays yet")
        kwargs["overlays"] = list(overlays)
    if "timeout" in params:
        kwargs["timeout"] = timeout
        result = await run_tree(**kwargs)
    else:
        try:
            result = await asyncio.wait_for(run_tree(**kwargs), timeout)
        except TimeoutError:
            raise TimeoutError(f"transcript {script.spec.name!r} did not finish in {timeout}s") from None
    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        validate_log(read(path).events)  # a flow of an invalid log would pin a bug
    raw = project(home, result.root_session_id, result, result.violations, script.spec.name)
    flow = Flow(normalize(raw))
    if result.violations:
        raise TranscriptViolation(flow, list(result.violations))
    return flow
