"""`dsh flow TRANSCRIPT...` (SPEC §19, §20; issue 10): the normalized settlement flow a snapshot stores.

- `dsh flow FILE` prints the flow YAML (exit 1 with the violations on stderr if the run broke its
  transcript).
- `--repeat N` runs N times, each in a fresh home and event loop; differing flows print the unified
  diff of the first two that differ on stdout, a summary on stderr, and exit 1.
- `--check DIR` compares each transcript's flow with `DIR/<name>.flow.yaml` byte for byte (unified
  diff, exit 1); missing and unused snapshots fail. `--update` rewrites them instead, and is
  refused (exit 2) when `CI` is set to anything but "", "0" or "false".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsh.cli.common import fail, warn


def flow(
    transcripts: Annotated[list[str], typer.Argument(help="Transcript names or paths.", metavar="TRANSCRIPT...")],
    overlay: Annotated[Optional[list[str]], typer.Option(
        "--overlay", metavar="NAME", help="Overlay name or path (repeatable).")] = None,
    timeout: Annotated[float, typer.Option(
        "--timeout", metavar="SECONDS", help="Give up on a run after this many seconds.", show_default=True)] = 60,
    repeat: Annotated[int, typer.Option(
        "--repeat", metavar="N", min=1, help="Run each transcript N times; differing flows exit 1.", show_default=True)] = 1,
    check: Annotated[Optional[Path], typer.Option("--check", help="Compare with DIR/<name>.flow.yaml snapshots.", metavar="DIR")] = None,
    update: Annotated[bool, typer.Option("--update", help="With --check: rewrite the snapshots.")] = False,
) -> None:
    """Run each TRANSCRIPT under the test profile in a temporary home; print or check its flow YAML."""
    import asyncio

    from dsh.loader.errors import DshError
    from dsh.loader.testing import FlowsDiffer, TranscriptViolation, arun_flows, check_repeats, plan_flow
    from dsh.loader.testing.snapshots import ci_is_read_only

    if update and check is None:
        fail("--update needs --check DIR", 2)
    if update and ci_is_read_only(os.environ):
        fail(f"--update is refused in CI (CI={os.environ.get('CI')!r}): snapshots are read-only there", 2)
    if check is None and len(transcripts) > 1:
        fail("several transcripts need --check DIR", 2)
    try:
        plans = [plan_flow(t, overlays=overlay or []) for t in transcripts]
    except DshError as exc:
        fail(exc.message, 2)
    names = [p.name for p in plans]
    if len(set(names)) != len(names):
        fail(f"two transcripts share a name: {', '.join(sorted({n for n in names if names.count(n) > 1}))}", 2)

    flows: dict[str, str] = {}
    broken = False
    for plan in plans:
        try:
            outcomes = asyncio.run(arun_flows(plan, repeat, timeout=timeout))
            flows[plan.name] = check_repeats(plan.name, outcomes).yaml
        except FlowsDiffer as exc:
            typer.echo(exc.diff, nl=False)
            warn(f"dsh: {exc.name}: {exc.distinct} distinct flows in {exc.runs} runs; "
                 f"runs {exc.first} and {exc.second} differ")
            raise typer.Exit(1) from None
        except TranscriptViolation as exc:
            broken = True
            flows[plan.name] = exc.flow.yaml
            for v in exc.violations:
                warn(f"dsh: {v.get('code')}" + (f" [{v['agent']}]" if v.get("agent") else "") + f": {v.get('message', '')}")
        except TimeoutError as exc:
            fail(str(exc), 1)
        if repeat > 1:
            warn(f"dsh: {plan.name}: {repeat} runs, one flow")
    if check is None:
        typer.echo(flows[names[0]], nl=False)
        raise typer.Exit(1 if broken else 0)
    _check(flows, check, update=update, broken=broken)


def _check(flows: dict[str, str], directory: Path, *, update: bool, broken: bool) -> None:
    from dsh.loader.testing.snapshots import check_snapshots

    report = check_snapshots(flows, directory, update=update)
    for diff in report.diffs.values():
        typer.echo(diff, nl=False)
    for path in report.missing:
        warn(f"dsh: missing snapshot {path}")
    for path in report.unused:
        warn(f"dsh: unused snapshot {path}")
    for path in report.written:
        warn(f"dsh: wrote {path}")
    for path in report.deleted:
        warn(f"dsh: deleted unused snapshot {path}")
    for name in report.diffs:
        warn(f"dsh: {name}: the flow differs from its snapshot")
    warn(f"dsh: {len(report.passed)} passed, {len(report.diffs)} differ, {len(report.missing)} missing, "
         f"{len(report.unused)} unused" + (f", {len(report.written)} written" if update else ""))
    raise typer.Exit(1 if report.failed or broken else 0)
