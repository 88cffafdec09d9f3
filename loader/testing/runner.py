"""Running a transcript into a normalized flow (SPEC §20.3), without pytest or syrupy.

The pytest plugin and `dsh flow` share this path, so a snapshot and the CLI print the same YAML
(§23 item 114). A run happens in a home the caller provides (the plugin passes a fresh temporary
directory) under the test profile's settings: no write-behind delay, no fsync, fences allowed.

The environment does not leak into a flow: unless `environ` is given, no `DSH_*` variable applies.

Repeats (issue 10): a replay run is an exact function of its transcript and configuration (SPEC §26
item 1), so N runs must give one flow. `plan_flow` loads and composes once (YAML loading is most of
a small run's cost); `arun_flows` runs the plan N times, each in a fresh home, and `check_repeats`
turns the first pair of differing flows into a `FlowsDiffer` carrying their unified diff.
"""

from __future__ import annotations

import asyncio
import difflib
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.session import read, validate_log
from dsh.loader.testing.flow import project
from dsh.loader.testing.normalize import dump_flow, normalize

if TYPE_CHECKING:
    from dsh.loader.config import Config
    from dsh.loader.transcripts import Transcript

__all__ = ["Flow", "FlowPlan", "FlowsDiffer", "TranscriptViolation", "arun_flow", "arun_flows",
           "check_repeats", "flow_diff", "plan_flow"]


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


class FlowsDiffer(AssertionError):
    """Two runs of one transcript gave different flows: the replay was not deterministic.

    `first` and `second` are the 1-based run numbers of the first differing pair; `diff` is their
    unified diff (run `first` as the old side)."""

    def __init__(self, name: str, runs: int, distinct: int, first: int, second: int, diff: str) -> None:
        self.name, self.runs, self.distinct = name, runs, distinct
        self.first, self.second, self.diff = first, second, diff
        super().__init__(
            f"transcript {name!r}: {distinct} distinct flows in {runs} runs; runs {first} and "
            f"{second} differ:\n{diff}"
        )


@dataclass(frozen=True)
class FlowPlan:
    """A transcript loaded and composed under the test profile, ready to run any number of times."""

    script: Transcript
    config: Config

    @property
    def name(self) -> str:
        return self.script.spec.name


def plan_flow(
    transcript: str | Path | FlowPlan, *, overlays: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> FlowPlan:
    """Load and compose once; raises the loader's and composer's `DshError`s (exit 2 material)."""
    if isinstance(transcript, FlowPlan):
        return transcript
    from dsh.loader.config import compose  # testing sits on headless; imported when a run starts
    from dsh.loader.transcripts import load_transcript

    from dsh.loader.tools import lint_transcript

    script = load_transcript(transcript)
    lint_transcript(script)  # tool names, arguments and placeholders against the real schemas
    composed = compose(
        profile="test", overlays=list(overlays), transcript=script, environ=environ or {}, pytest_plugin=True
    )
    return FlowPlan(script=script, config=composed.config)


async def arun_flow(
    transcript: str | Path | FlowPlan,
    *,
    home: Path,
    overlays: Sequence[str] = (),
    timeout: float = 60,
    environ: Mapping[str, str] | None = None,
) -> Flow:
    """Run `transcript` in `home` under the test profile, project and normalize its flow; raise
    `TranscriptViolation` on any violation and `TimeoutError` when the run outlives `timeout`."""
    from dsh.loader.headless import RunRequest, run_tree

    plan = plan_flow(transcript, overlays=overlays, environ=environ)
    script = plan.script
    request = RunRequest(home=home, config=plan.config, transcript=script, fences_allowed=True)
    try:
        # A loud backstop only: it fails the flow, it never orders anything inside it.
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


async def arun_flows(
    plan: FlowPlan, repeat: int, *, timeout: float = 60, home: Path | None = None
) -> list[Flow | TranscriptViolation]:
    """`repeat` runs of one plan, each in a fresh home (under `home`, else a temporary directory).

    A run that breaks its transcript is kept as its `TranscriptViolation` (which holds the flow),
    so a violation that comes and goes shows up as differing flows rather than as a lucky pass."""
    outcomes: list[Flow | TranscriptViolation] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="dsh-flow-", dir=home) as tmp:
            try:
                outcomes.append(await arun_flow(plan, home=Path(tmp), timeout=timeout))
            except TranscriptViolation as exc:
                outcomes.append(exc)
    return outcomes


def flow_diff(old: str, new: str, old_name: str, new_name: str) -> str:
    return "".join(difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=old_name, tofile=new_name
    ))


def check_repeats(name: str, outcomes: Sequence[Flow | TranscriptViolation]) -> Flow:
    """The one flow all runs gave. `FlowsDiffer` names the first run that differs from run 1; when
    all agree but broke the transcript, run 1's `TranscriptViolation` is raised."""
    flows = [o.flow if isinstance(o, TranscriptViolation) else o for o in outcomes]
    # The YAML dump is most of a small run's cost (ruamel's emitter), so a run whose data has
    # run 1's `repr` is not dumped: a flow is plain str/int/float/bool/None/list/dict, whose `repr`
    # fixes every type, value and key order the dump depends on. Any other run is compared by its
    # YAML text, as the snapshot would compare it.
    first_key = repr(flows[0].data)
    first_text: str | None = None
    for index, flow in enumerate(flows[1:], start=2):
        if repr(flow.data) == first_key:
            continue
        first_text = flows[0].yaml if first_text is None else first_text
        text = flow.yaml
        if text != first_text:
            diff = flow_diff(first_text, text, f"{name} (run 1)", f"{name} (run {index})")
            distinct = len({f.yaml for f in flows})  # the failing path: every run dumped
            raise FlowsDiffer(name, len(flows), distinct, 1, index, diff)
    first = outcomes[0]
    if isinstance(first, TranscriptViolation):
        raise first
    return first
