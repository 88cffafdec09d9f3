"""Fences (SPEC §16) and transcript strictness (§15.2–§15.4), driven through real runs of small
transcripts written into `tmp_path` (§23 items 88, 89, 91–94).

Fences only delay a pre-step, run maintenance on an idle agent, or fail a checkpoint; every test
here observes a fence through what the run did: the flow (§20) shows where each message landed, and
`run_kit.run_timeline` shows the global order of requests and log events where the flow cannot
(a held step starts only after the insert it waits for; a notice that arrives during maintenance
latches). The one timed fact, `FENCE_TIMEOUT` after 0.2 s, measures a timeout; nothing here sleeps.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dsh.cli.main import app
from dsh.loader.config import Config
from dsh.loader.errors import ConfigError
from dsh.loader.headless import RunRequest, run_tree
from dsh.loader.testing import TranscriptViolation
from dsh.loader.texts import render
from dsh.loader.transcripts import load_transcript
from run_kit import run_timeline


def transcript(directory: Path, name: str, body: str) -> Path:
    """Write a transcript (`version`, `name` and a default `task` are added) and return its path."""
    path = directory / f"{name}.yaml"
    text = textwrap.dedent(body).strip("\n")
    task = "" if "\ntask:" in f"\n{text}" else "task: go\n"
    path.write_text(f"version: 1\nname: {name}\n{task}{text}\n")
    return path


@pytest.fixture
def fast_fences(tmp_path: Path) -> Path:
    """An overlay that lets a fence wait 0.2 s instead of the test profile's 10 s."""
    path = tmp_path / "fast-fences.yaml"
    path.write_text("testing: {fenceTimeoutSeconds: 0.2}\n")
    return path


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """`dsh …` in-process, in a clean environment and a fresh home; returns the CliRunner result."""
    for name in ("CI", "DSH_PROFILE", "DSH_HOME"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"

    def invoke(*args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--home", str(home)] if args[0] == "run" else list(args))

    yield invoke


def flow_of(dsh_flow: Any, path: Path, **kwargs: Any) -> Any:
    """The flow of a run, also when it had violations (the violation carries the flow)."""
    try:
        return dsh_flow(path, **kwargs)
    except TranscriptViolation as exc:
        return exc.flow


def session(flow: Any, position: str) -> dict[str, Any]:
    return next(s for s in flow["sessions"] if s["position"] == position)


def step_inputs(flow: Any, position: str, turn: int) -> list[list[tuple[str, str]]]:
    """Per step of one turn: the (source, queue) of each entered message."""
    t = next(t for t in session(flow, position)["turns"] if t["turn"] == turn)
    return [[(m["source"], m["queue"]) for m in s["input"]] for s in t["steps"]]


def inserts(tl: Any, agent: str, kind: str) -> list[int]:
    return [i for i, e in enumerate(tl.entries) if e.agent == agent and e.is_insert(kind)]


# A root that starts one background child and answers three times; the child answers once.
ONE_CHILD = """
agents:
  root:
    replies:
      - toolCalls: [{id: start-child, name: subagent, arguments: {label: child, prompt: Reply with CHILD_OK.}}]
      - text: STARTED
      - text: NOTED
  child:
    spawnedBy: start-child
    replies: [{text: CHILD_OK}]
"""


# -- item 91: test-only ----------------------------------------------------------------------------
def test_m91_fences_under_the_default_profile_are_refused_before_anything_runs(cli: Any, tmp_path: Path) -> None:
    """Matrix 91: fences under the default profile → exit 2, T-CLI-FENCES; nothing starts."""
    path = load_transcript("background-settlement").path
    result = cli("run", "--profile", "default", "--transcript", "background-settlement")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == f"dsh: {render('T-CLI-FENCES', file=path)}\n"
    assert not (tmp_path / "home" / "sessions").exists()


@pytest.mark.parametrize("profile", [
    pytest.param(["--profile", "test"], id="m91-test-profile"),
    pytest.param([], id="m91-transcript-default"),
])
def test_m91_fences_under_the_test_profile_run(cli: Any, profile: list[str]) -> None:
    """Matrix 91: under `test` (the default profile of a transcript run) the fences run."""
    result = cli("run", *profile, "--transcript", "background-settlement")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "PARENT_RECEIVED_CHILD_RESULT\n", "")


async def test_m91_run_tree_refuses_fences_unless_allowed(tmp_path: Path) -> None:
    request = RunRequest(home=tmp_path, config=Config(), transcript=load_transcript("background-settlement"))
    with pytest.raises(ConfigError) as caught:
        await run_tree(request)
    assert caught.value.code == "FENCES_REFUSED"
    assert not (tmp_path / "sessions").exists()


# -- item 92: hold until an insert of kind K ---------------------------------------------------------
HOLD_FOR_REPORT = """
fences:
  - hold: {agent: root, turn: 1, step: 2, until: {inboxAccepted: {agent: root, kind: subagent-report}}}
  # The report waits for root S2's claim, so S2 is claimed empty whatever a step costs in loop iterations.
  - hold: {agent: child, turn: 1, step: 1, until: {stepReached: {agent: root, turn: 1, step: 2}}}
  - hold: {agent: child, turn: 1, step: 2, until: {stepReached: {agent: root, turn: 1, step: 3}}}
  - hold: {agent: root, turn: 1, step: 3, until: {inboxAccepted: {agent: root, kind: subagent-settled}}}
agents:
  root:
    replies:
      - toolCalls: [{id: start-child, name: subagent, arguments: {label: reporter, prompt: Report R.}}]
      - text: WAITING
      - text: GOT_REPORT
      - text: GOT_NOTICE
  child:
    spawnedBy: start-child
    replies:
      - toolCalls: [{id: child-report, name: report, arguments: {output: R}}]
      - text: CHILD_DONE
"""


async def test_m92_held_step_resumes_only_after_the_insert_and_that_insert_enters_the_next_step(tmp_path: Path) -> None:
    """Matrix 92: root S2 waits for a `subagent-report` insert, S3 for a `subagent-settled` one;
    each insert lands while the step is held, so it enters the step after."""
    tl = await run_timeline(transcript(tmp_path, "hold-for-report", HOLD_FOR_REPORT), tmp_path / "home")
    assert tl.result.violations == [] and tl.result.exit_code == 0
    [report] = inserts(tl, "root", "subagent-report")
    [notice] = inserts(tl, "root", "subagent-settled")
    assert tl.index("root", "step/end", turn=1, step=1) < report < tl.index("root", "step/start", turn=1, step=2)
    assert tl.index("root", "step/end", turn=1, step=2) < notice < tl.index("root", "step/start", turn=1, step=3)
    assert step_inputs(tl.flow, "0", 1) == [
        [("user", "next-turn")],
        [],  # claimed before the report arrived: held, then ran without it
        [("subagent-report", "next-step")],
        [("subagent-settled", "next-step")],
    ]
    assert [s["output"].get("text") for s in tl.flow["sessions"][0]["turns"][0]["steps"][1:]] == [
        "WAITING", "GOT_REPORT", "GOT_NOTICE"]


# -- item 93: FENCE_TIMEOUT ------------------------------------------------------------------------
NEVER_MET = """
fences:
  - hold: {agent: root, turn: 1, step: 1, until: {inboxAccepted: {agent: root, kind: subagent-report}}}
agents:
  root: {replies: []}
"""


def test_m93_unmet_condition_times_out_after_the_overlay_timeout(dsh_flow: Any, tmp_path: Path, fast_fences: Path) -> None:
    """Matrix 93: FENCE_TIMEOUT after `testing.fenceTimeoutSeconds` (0.2 s from an overlay file);
    the held turn ends `error`, the run exits 1."""
    path = transcript(tmp_path, "never-met", NEVER_MET)
    with pytest.raises(TranscriptViolation) as caught:
        dsh_flow(path, overlays=[str(fast_fences)])
    flow = caught.value.flow
    assert [v["code"] for v in caught.value.violations] == ["FENCE_TIMEOUT"]
    # The overlay's 0.2 s, not the test profile's 10 s: read from what the fence waited, not timed.
    assert caught.value.violations[0]["message"].endswith("waited 0.2s")
    assert flow["violations"] == [{"code": "FENCE_TIMEOUT", "agent": "root"}]
    [held] = session(flow, "0")["turns"]
    assert held["steps"] == [] and [m["source"] for m in held["claimedUnrun"]] == ["user"]
    assert held["end"]["kind"] == "error" and held["end"]["code"] == "FENCE_TIMEOUT"
    assert flow["result"]["exitCode"] == 1 and flow["result"]["stopReason"] == "error"


def test_m93_cli_run_with_the_overlay_exits_1(cli: Any, tmp_path: Path, fast_fences: Path) -> None:
    result = cli("run", "--transcript", str(transcript(tmp_path, "never-met", NEVER_MET)), "--overlay", str(fast_fences))
    assert result.exit_code == 1
    assert "dsh: FENCE_TIMEOUT [root]" in result.stderr


# -- item 94: FENCE_UNUSED -------------------------------------------------------------------------
@pytest.mark.parametrize(("fence", "agent"), [
    pytest.param("hold: {agent: root, turn: 2, until: {turnEnded: {agent: root, turn: 1}}}", "root", id="m94-hold"),
    pytest.param('hold: {agent: "*children", until: {turnEnded: {agent: root, turn: 1}}}', "*children", id="m94-children"),
    pytest.param("maintenance: {agent: root, afterTurn: 2, until: {turnEnded: {agent: root, turn: 1}}}", "root",
                 id="m94-maintenance"),
    pytest.param("failCheckpoint: {agent: root, turn: 1, step: 2}", "root", id="m94-fail-checkpoint"),
])
def test_m94_fence_whose_point_is_never_reached_is_unused(dsh_flow: Any, tmp_path: Path, fence: str, agent: str) -> None:
    """Matrix 94: the run completes, yet the unused fence is a violation (exit 1)."""
    path = transcript(tmp_path, "unused", f"""
        fences:
          - {fence}
        agents:
          root: {{replies: [{{text: HI}}]}}
    """)
    with pytest.raises(TranscriptViolation) as caught:
        dsh_flow(path)
    assert caught.value.flow["violations"] == [{"code": "FENCE_UNUSED", "agent": agent}]
    assert caught.value.flow["result"] == {"stopReason": "completed", "exitCode": 1, "output": "HI"}


# -- maintenance -----------------------------------------------------------------------------------
MAINTENANCE = """
fences:
  - hold: {agent: a, turn: 1, step: 1, until: {turnEnded: {agent: root, turn: 1}}}
  - hold: {agent: b, turn: 1, step: 1, until: {inboxAccepted: {agent: root, kind: subagent-settled, count: 1}}}
  %s
agents:
  root:
    replies:
      - toolCalls:
          - {id: start-a, name: subagent, arguments: {label: a, prompt: Reply with A_DONE.}}
          - {id: start-b, name: subagent, arguments: {label: b, prompt: Reply with B_DONE.}}
      - text: STARTED
      - text: A_NOTED
      - text: B_NOTED
  a: {spawnedBy: start-a, replies: [{text: A_DONE}]}
  b: {spawnedBy: start-b, replies: [{text: B_DONE}]}
"""
ROOT_MAINTENANCE = (
    "- maintenance: {agent: root, afterTurn: 1, "
    "until: {inboxAccepted: {agent: root, kind: subagent-settled, count: 2}}}"
)


async def test_maintenance_after_turn_1_latches_a_notice_and_runs_it_afterwards(tmp_path: Path) -> None:
    """Maintenance engages when root T1 ends and lasts until both notices are in. A's notice arrives
    during it: the wake latches (no turn yet), B still runs, and only then does root T2 open."""
    tl = await run_timeline(transcript(tmp_path, "maintenance", MAINTENANCE % ROOT_MAINTENANCE), tmp_path / "home")
    assert tl.result.violations == [] and tl.result.exit_code == 0
    a_notice, b_notice = inserts(tl, "root", "subagent-settled")
    t2 = tl.index("root", "turn/start", turn=2)
    assert tl.index("root", "turn/end", turn=1) < a_notice
    [(b_request, _)] = tl.requests("b")
    assert a_notice < b_request < b_notice < t2  # A's notice waited for the maintenance to end
    assert not [e for e in tl.between(a_notice, t2) if e.agent == "root" and e.type == "turn/start"]
    # Then each notice opens its own turn, in arrival order (one next-turn message per turn).
    assert step_inputs(tl.flow, "0", 2) == [[("subagent-settled", "next-turn")]]
    assert step_inputs(tl.flow, "0", 3) == [[("subagent-settled", "next-turn")]]
    assert [n["from"] for n in tl.flow["notices"]] == ["S2", "S3"]
    assert all(n["insertedAt"] == "idle" for n in tl.flow["notices"])


async def test_without_maintenance_the_first_notice_opens_a_turn_at_once(tmp_path: Path) -> None:
    """The contrast: with no maintenance, A's notice wakes the idle root in the same span."""
    tl = await run_timeline(transcript(tmp_path, "no-maintenance", MAINTENANCE % ""), tmp_path / "home")
    [a_notice, _] = inserts(tl, "root", "subagent-settled")
    assert tl.index("root", "turn/start", turn=2) == a_notice + 1


# -- failCheckpoint --------------------------------------------------------------------------------
@pytest.mark.parametrize(("extra", "message"), [
    pytest.param("", "simulated checkpoint failure", id="default-message"),
    pytest.param(", message: disk full (simulated)", "disk full (simulated)", id="custom-message"),
])
def test_fail_checkpoint_ends_the_turn_with_checkpoint_failed(
    dsh_flow: Any, tmp_path: Path, extra: str, message: str
) -> None:
    """The claim is flushed (the log holds it: `claimedUnrun`), then the checkpoint fails: no step,
    turn `error` CHECKPOINT_FAILED. A fence that fired is no violation; the root's error exits 1."""
    path = transcript(tmp_path, "fail-checkpoint", f"""
        fences:
          - failCheckpoint: {{agent: root, turn: 1, step: 1{extra}}}
        agents:
          root: {{replies: []}}
    """)
    flow = dsh_flow(path)
    [t1] = session(flow, "0")["turns"]
    assert t1["steps"] == [] and [m["source"] for m in t1["claimedUnrun"]] == ["user"]
    assert t1["end"] == {"kind": "error", "code": "CHECKPOINT_FAILED", "message": message}
    assert flow["violations"] == []
    assert flow["result"] == {"stopReason": "error", "exitCode": 1, "output": ""}


# -- conditions ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fences", [
    pytest.param("- hold: {agent: root, turn: 1, step: 2, until: {settled: {agent: child}}}", id="settled"),
    pytest.param("- hold: {agent: root, turn: 1, step: 2, until: {any: [{turnEnded: {agent: root, turn: 2}}, "
                 "{inboxAccepted: {agent: root, kind: subagent-settled}}]}}", id="any"),
    pytest.param("- hold: {agent: root, turn: 1, step: 2, until: {all: [{stepReached: {agent: root, turn: 1, step: 2}}, "
                 "{settled: {agent: child}}]}}", id="all"),
    pytest.param("- hold: {agent: child, turn: 1, step: 1, until: {stepReached: {agent: root, turn: 1, step: 2}}}\n"
                 "  - hold: {agent: root, turn: 1, step: 2, until: {settled: {agent: child}}}", id="stepReached"),
])
def test_conditions_that_wait_for_the_settlement_give_the_background_settlement_flow(
    dsh_flow: Any, tmp_path: Path, fences: str
) -> None:
    """Each condition holds root S2 until the child has settled: the notice enters S3, as in (a)."""
    flow = dsh_flow(transcript(tmp_path, "condition", f"fences:\n  {fences}\n{ONE_CHILD}"))
    assert step_inputs(flow, "0", 1) == [[("user", "next-turn")], [], [("subagent-settled", "next-step")]]
    assert [(n["insertedAt"], n["claimedAt"]) for n in flow["notices"]] == [
        ({"turn": 1, "lastStep": 1}, {"turn": 1, "step": 3})]
    assert flow["result"] == {"stopReason": "completed", "exitCode": 0, "output": "NOTED"}


def test_all_needs_every_condition(dsh_flow: Any, tmp_path: Path, fast_fences: Path) -> None:
    """`all` with one member that can never hold (root T1 cannot end while its S2 is held) times out."""
    fences = ("fences:\n  - hold: {agent: root, turn: 1, step: 2, "
              "until: {all: [{settled: {agent: child}}, {turnEnded: {agent: root, turn: 1}}]}}\n")
    path = transcript(tmp_path, "all-unmet", fences + ONE_CHILD)
    flow = flow_of(dsh_flow, path, overlays=[str(fast_fences)])
    assert {"code": "FENCE_TIMEOUT", "agent": "root"} in flow["violations"]
    assert session(flow, "0")["turns"][0]["end"]["code"] == "FENCE_TIMEOUT"


PARKED = """
fences:
  - hold: {agent: root, turn: 1, step: 3, until: {hangReached: {agent: worker}}}
  - hold: {agent: root, turn: 1, step: 4, until: {parked: {agent: worker}}}
agents:
  root:
    replies:
      - toolCalls: [{id: start-worker, name: subagent, arguments: {label: worker, prompt: Work.}}]
      - toolCalls: [{id: send-b, name: send_message, arguments: {agent_id: "{{child:start-worker}}", message: B}}]
      - toolCalls: [{id: stop-worker, name: interrupt_agent, arguments: {agent_id: "{{child:start-worker}}"}}]
      - text: PARKED_SEEN
  worker:
    spawnedBy: start-worker
    replies: [{hang: {text: partial}}]
"""


async def test_parked_and_hang_reached_hold_until_the_worker_hangs_and_then_parks(tmp_path: Path) -> None:
    """S3 (the interrupt) waits for the hang; S4 waits until the interrupted worker is idle with B
    still accepted, i.e. parked."""
    tl = await run_timeline(transcript(tmp_path, "parked", PARKED), tmp_path / "home")
    assert tl.result.violations == [] and tl.result.output == "PARKED_SEEN"
    [(hang_request, _)] = tl.requests("worker")
    assert hang_request < tl.index("root", "step/start", turn=1, step=3)
    assert tl.index("worker", "turn/end", turn=1) < tl.index("root", "step/start", turn=1, step=4)
    assert session(tl.flow, "0.1")["turns"][0]["end"] == {"kind": "aborted", "cause": "parent"}
    # Parked work is released when the run ends (a transcript run forces run.parked: release).
    assert tl.result.released == [next(sid for sid, key in tl.keys.items() if key == "worker")]


# -- fences never create, send or cancel -----------------------------------------------------------
@pytest.mark.parametrize("fences", [
    pytest.param('fences:\n  - hold: {agent: "*children", until: {turnEnded: {agent: root, turn: 1}}}\n', id="child-hold"),
    pytest.param("fences:\n  - hold: {agent: root, turn: 1, step: 2, until: {settled: {agent: child}}}\n", id="root-hold"),
])
async def test_holds_change_where_messages_land_never_which_messages_exist(tmp_path: Path, fences: str) -> None:
    """A run with only holds inserts exactly the messages of the same transcript without fences,
    and cancels none."""
    fenced = await run_timeline(transcript(tmp_path, "fenced", fences + ONE_CHILD), tmp_path / "fenced")
    # Unfenced, where the notice lands is a race (it may even leave a reply unconsumed); what is
    # inserted is not.
    bare = await run_timeline(transcript(tmp_path, "bare", ONE_CHILD), tmp_path / "bare")
    assert fenced.inserts() == bare.inserts()
    assert [(agent, kind) for agent, kind, _ in fenced.inserts()] == [
        ("child", "user"), ("root", "subagent-settled"), ("root", "user")]
    assert fenced.canceled() == [] and bare.canceled() == []
    assert fenced.result.violations == []


# -- item 88: strictness ---------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "code", "agent", "output"), [
    pytest.param("""
        fences:
          - hold: {agent: "*children", until: {turnEnded: {agent: root, turn: 1}}}
        agents:
          root:
            replies:
              - toolCalls: [{id: start-child, name: subagent, arguments: {label: c, prompt: P}}]
              - text: STARTED
              - text: NOTED
          child: {spawnedBy: start-child, replies: []}
    """, "REPLAY_SCRIPT_EXHAUSTED", "child", "NOTED", id="m88-exhausted"),
    pytest.param("""
        agents:
          root:
            replies:
              - toolCalls:
                  - {id: start-extra, name: subagent, arguments: {label: extra, prompt: P, run_in_background: false}}
              - text: DONE
    """, "REPLAY_UNRECORDED_SESSION", None, "DONE", id="m88-unrecorded"),
    pytest.param("""
        agents:
          root: {replies: [{text: ONE}, {text: NEVER_ASKED_FOR}]}
    """, "REPLAY_UNCONSUMED", "root", "ONE", id="m88-unconsumed"),
])
def test_m88_broken_script_is_a_violation_and_exits_1_although_the_root_completed(
    cli: Any, tmp_path: Path, body: str, code: str, agent: str | None, output: str
) -> None:
    """Matrix 88: exhausted / unrecorded / unconsumed → that violation; exit 1; root `completed`."""
    result = cli("run", "--json", "--transcript", str(transcript(tmp_path, "broken", body)))
    assert result.exit_code == 1
    final = json.loads(result.stdout.splitlines()[-1])
    assert (final["type"], final["stopReason"], final["exitCode"], final["output"]) == ("result", "completed", 1, output)
    assert [(v["code"], v.get("agent")) for v in final["violations"]] == [(code, agent)]
    assert f"dsh: {code}" in result.stderr


# -- item 89: placeholders -------------------------------------------------------------------------
PLACEHOLDERS = """
fences:
  - hold: {agent: "*children", until: {turnEnded: {agent: root, turn: 1}}}
agents:
  root:
    replies:
      - toolCalls: [{id: start, name: subagent, arguments: {label: c, prompt: P}}]
      - toolCalls:
          - {id: send-more, name: send_message, arguments: {agent_id: "{{child:start}}", message: "MORE for {{session:child}}"}}
      - text: "SENT to {{child:start}}"
      - text: NOTED
  child:
    spawnedBy: start
    replies: [{text: C1}, {text: C2}]
"""


async def test_m89_placeholders_resolve_to_the_live_child_id(tmp_path: Path) -> None:
    """Matrix 89: `{{child:start}}` (and `{{session:child}}`) become the child's live session id."""
    tl = await run_timeline(transcript(tmp_path, "placeholders", PLACEHOLDERS), tmp_path / "home")
    assert tl.result.violations == [] and tl.result.exit_code == 0
    child_id = next(sid for sid, key in tl.keys.items() if key == "child")
    call = tl.entries[tl.index("root", "tool/call", callId="send-more")].data
    assert json.loads(call["arguments"]) == {"agent_id": child_id, "message": f"MORE for {child_id}"}
    assert session(tl.flow, "0")["turns"][0]["steps"][2]["output"]["text"] == "SENT to S2"
    # The message reached that child: its T2 runs it.
    assert [m["text"] for m in session(tl.flow, "0.1")["turns"][1]["steps"][0]["input"]] == ["MORE for S2"]


def test_m89_unresolvable_placeholder_fails_the_request(dsh_flow: Any, tmp_path: Path) -> None:
    """Matrix 89: an unresolvable placeholder → REPLAY_PLACEHOLDER; that request fails (turn error).

    Since issue 10 a placeholder naming no call or agent is a load error (the transcript lint,
    tests/tools/test_lint.py); what stays a run-time failure is a valid name not bound *yet*: here
    `late` would be spawned by the root's second reply, which the failed first one never reaches."""
    path = transcript(tmp_path, "bad-placeholder", """
        agents:
          root: {replies: [{text: "hello {{session:late}}"},
                           {toolCalls: [{id: s, name: subagent, arguments: {label: l, prompt: p}}]}]}
          late: {spawnedBy: s, replies: [{text: never}]}
    """)
    with pytest.raises(TranscriptViolation) as caught:
        dsh_flow(path)
    flow = caught.value.flow
    assert flow["violations"] == [{"code": "REPLAY_PLACEHOLDER", "agent": "root"},
                                  {"code": "REPLAY_UNCONSUMED", "agent": "root"},
                                  {"code": "REPLAY_UNCONSUMED", "agent": "late"}]
    [t1] = session(flow, "0")["turns"]
    assert t1["end"]["kind"] == "error" and t1["end"]["code"] == "REPLAY_PLACEHOLDER"
    assert flow["result"]["exitCode"] == 1


def test_fact_counts_match_a_scan_of_the_facts_after_records_and_merges() -> None:
    """Issue 13: `_count` reads per-prefix counters instead of rescanning every fact; after any mix
    of recorded and merged facts (repeats included), each count equals the scan it replaced."""
    import random

    from dsh.loader.fences import Fences

    fences = Fences([], tree=None, replay=None, timeout=1.0)  # type: ignore[arg-type]
    rng = random.Random(13)
    kinds, keys, details = ["inserted", "settled", "parked"], ["root", "w1", "w2"], ["a", "b", 1, None]
    for _ in range(300):
        fact = (rng.choice(kinds), rng.choice(keys), *rng.sample(details, rng.randint(0, 2)))
        fences.merge([fact, fact] if rng.random() < 0.5 else [fact])
    for kind in kinds:
        for key in keys:
            for detail in [(), *[(d,) for d in details]]:
                n = len(detail)
                scan = sum(1 for f in fences._facts if f[0] == kind and f[1] == key and f[2:2 + n] == detail)
                assert fences._count(kind, key, *detail) == scan, (kind, key, detail)
