"""Running a transcript into a normalized flow (SPEC §20.3), without pytest or syrupy.

The pytest plugin and `dsh flow` share this path, so a snapshot and the CLI print the same YAML
(§23 item 114). A run happens in a home the caller provides (the plugin passes a fresh temporary
directory) under the test profile's settings: no write-behind delay, no fsync, fences allowed.

The environment does not leak into a flow: unless `environ` is given, no `DSH_*` variable applies.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
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
    environ: Mapping[str, str] | None = None,
) -> Flow:
    """Run `transcript` in `home` under the test profile, project and normalize its flow; raise
    `TranscriptViolation` on any violation and `TimeoutError` when the run outlives `timeout`."""
    from loader.config import compose  # testing sits on headless; imported when a run starts
    from loader.headless import RunRequest, run_tree
    from loader.transcripts import load_transcript

    script = load_transcript(transcript)
    composed = compose(
        profile="test", overlays=list(overlays), transcript=script, environ=environ or {}, pytest_plugin=True
    )
    request = RunRequest(home=home, config=composed.config, transcript=script, fences_allowed=True)
    try:
        result = await asyncio.wait_for(run_tree(request), timeout)
    except TimeoutError:
        raise TimeoutError(f"transcript {script.spec.name!r} did not finish in {timeout}s") from None
    for path in sorted((home / "sessions").glob("*/session.jsonl")):
        validate_log(read(path).events)  # a flow of an invalid log would pin a bug
    raw = project(home, result.root_session_id, result, result.violations, script.spec.name)
    flow = Flow(normalize(raw))
    if result.violations:
        raise TranscriptViolation(flow, list(result.violations))
    return flow
