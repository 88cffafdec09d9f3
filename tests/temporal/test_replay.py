"""Workflow code stays deterministic (issue 12 item 4): the histories recorded by
scripts/temporal_histories.py and committed under tests/temporal/histories/ replay against today's
`AgentWorkflow`. A change to workflow code that would break running trees fails here."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import temporal_kit  # noqa: F401  (skips without the temporal extra, fails under CI)
from temporalio.client import WorkflowHistory
from temporalio.workflow import UnfinishedUpdateHandlersWarning
from temporalio.worker import Replayer

from dsh.loader.engines.reader import StreamReader
from dsh.loader.engines.turn_run import TurnRunWorkflow
from dsh.loader.engines.workflow import AgentWorkflow

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*.json"))


def test_histories_are_committed_for_the_root_and_child_runs() -> None:
    names = {p.name for p in HISTORIES}
    assert {"hello.0.json", "background-settlement.0.json", "background-settlement.1.json",
            "report-then-settle.0.json", "report-then-settle.1.json",
            "interrupt-parked-resume.0.json", "interrupt-parked-resume.1.json",  # interrupt, parking, follow-ups
            "followups-checkpoint-failure.0.json", "followups-checkpoint-failure.1.json",
            # the worker's residency as two runs: continue-as-new and the carried input replay too
            # and the root continued as new with its child resident (run 1 of the root: .1)
            "continued-as-new.0.json", "continued-as-new.1.json", "continued-as-new.2.json",
            "continued-as-new.3.json",
            # histories recorded before a workflow change still replay (runs started before it)
            "v1-continued-as-new.2.json", "v2-continued-as-new.2.json",
            # a child's turn failing for good with its child resident (test_failed_child_tree.py)
            "failed-turn-with-child.1.json",
            # a root drained before its run fails (test_failed_root.py); a child cancelled by hand,
            # one terminated by hand (its parent releases its child, which enters its notice into
            # the terminated child's log) (test_hand_ended.py); and the histories before them
            "failed-root-drains.0.json", "cancelled-child.1.json", "terminated-child.0.json",
            "terminated-child.2.json", "v3-hello.0.json", "v3-continued-as-new.2.json",
            # one page of the stream over the server: the reader workflow (test_server_stream.py)
            "stream-page.0.json", "v1-stream-page.0.json",
            # a tree on two homes, each session pinned to its home's queue, a child cold-resumed
            # twice on its home (test_homes.py)
            "homes-cold-resume.0.json", "homes-cold-resume.3.json",
            "v3-continued-as-new.3.json",
            # a root's later run watching the child it holds no handle to: it completes (.1; before
            # the watcher: v4-), or it is terminated by hand and settled (test_hand_ended.py)
            "v4-continued-as-new.1.json", "terminated-handleless-child.0.json",
            # workers without a home: each later run created the session again (before: v5-)
            "v5-continued-as-new.0.json", "v5-continued-as-new.3.json",
            # a root cancelled by hand, idle and mid-turn: it stops its tree (test_root_cancel.py)
            "cancelled-root-idle.0.json", "cancelled-root-mid-turn.0.json",
            # a start past temporal.maxRunningChildren refused by the root's run (test_running_limit.py)
            "running-limit.0.json",
            # ... counting the children an earlier run started (RESIDENT_LIMIT_PATCH)
            "running-limit-carried.1.json",
            # a parent's later run telling a settled child's next epoch `heard_any` (test_homes_carried.py)
            "homes-carried.mid.json",
            # every child signalled its notice (`settled`) before QUIET_SETTLE_PATCH; since, only
            # a child told `parent_moved` (continued-as-new.3) does, and the others return it
            "v6-background-settlement.1.json", "v6-continued-as-new.0.json", "v6-continued-as-new.3.json",
            # a root's run that began mid-turn and moved again, and that turn's own workflow
            # (TURN_RUN_PATCH, `temporal.turnWorkflows: root`, test_turn_across_runs.py)
            "turn-across-runs.0.json", "turn-across-runs.turn.json",
            # every shipped transcript under the default `temporal.turnWorkflows: root`: the agents'
            # runs and each turn's own workflow (.turn<k>); the same under `none`, before: v7-
            "child-max-tokens.1.json", "four-children-one-step.4.json", "notice-new-turn.1.json",
            "hello.turn0.json", "background-settlement.turn0.json", "report-then-settle.turn1.json",
            "interrupt-parked-resume.turn1.json", "followups-checkpoint-failure.turn1.json",
            "child-max-tokens.turn1.json", "four-children-one-step.turn0.json", "notice-new-turn.turn1.json",
            "continued-as-new.5.json", "continued-as-new.turn1.json",
            "v7-hello.0.json", "v7-interrupt-parked-resume.1.json", "v7-continued-as-new.3.json"} <= names


@pytest.mark.parametrize("path", HISTORIES, ids=[p.stem for p in HISTORIES])
async def test_a_committed_history_replays_against_todays_workflow(path: Path) -> None:
    recorded = json.loads(path.read_text())
    history = WorkflowHistory.from_json(recorded["workflowId"], recorded["history"])
    with warnings.catch_warnings(record=True) as caught:  # process-wide: the activation's thread too
        warnings.simplefilter("always")
        result = await Replayer(workflows=[AgentWorkflow, TurnRunWorkflow, StreamReader]).replay_workflow(history)
    assert result.replay_failure is None
    # A long-poll open when the run ended is abandoned by policy (root_handlers.long_poll), not
    # warned of: moved-turn-terminated's run fails with its turn's poll open.
    assert [w for w in caught if issubclass(w.category, UnfinishedUpdateHandlersWarning)] == []
