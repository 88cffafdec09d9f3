"""The workflow's patch names (loader/engines/README.md): each new behaviour of `AgentWorkflow`
that changes its commands is taken only where `workflow.patched(NAME)` says so, so a history
recorded before it replays the old way (tests/temporal/test_replay.py). Workflow-side: no import.
A name is what history records; never rename one."""

from __future__ import annotations

__all__ = ["CANCEL_PATCH", "FAILED_TURN_PATCH", "HANDOVER_PATCH", "ORPHANS_PATCH", "PAGED_PATCH", "ROOT_CANCEL_PATCH",
           "QUIET_SETTLE_PATCH", "RESIDENT_LIMIT_PATCH", "ROOT_DRAIN_PATCH", "RUNNING_LIMIT_PATCH", "TURN_RUN_PATCH",
           "WATCH_PATCH"]

# Any agent's run may continue as new with children resident (issue 12 "Not yet" item 3):
# children start ABANDON and signal their result to the parent's current run. Runs recorded
# before it (no marker) replay the old way: only a child, only with no child resident.
HANDOVER_PATCH = "continue-with-children"
# A child whose turn failed for good stays resident while it has children resident (issue 12 "Not
# yet" item 0): the failure is the epoch's error end in its log, as a local turn that ends
# `error`, and its children's notices wake its next turn. Before it, the run failed and its
# children lived on, their notices sent to a workflow id with no running run.
FAILED_TURN_PATCH = "failed-turn-keeps-children"
# A root whose turn failed for good with children resident is drained first: each resident child
# is released (disposed child-first, cancel {kind: parent}) and its notice enters the root's log
# as an inject, then the run fails. Before it, the run failed at once and its children (started
# ABANDON) lived on, their notices lost.
ROOT_DRAIN_PATCH = "failed-root-drains"
# A child's run cancelled by hand (`temporal workflow cancel`) disposes itself as its parent's
# drain would (release: children first, cancel {kind: parent}, the epoch's notice to its parent),
# its running turn shielded so the cancel reaches it through its poll. Before it, the run ended
# cancelled, its children lived on and its parent heard an `error` from no log.
CANCEL_PATCH = "cancelled-child-disposes"
# A root cancelled by hand stops as a local run stops on a first SIGINT: its running turn (shielded,
# as a child's) hears the interrupt {kind: user} through its poll and ends in its log, every
# resident child is released (children first, cancel {kind: parent}), their notices and what the
# root never read enter its log unread, no new turn, and the run completes with stop reason
# `aborted`. Before it, the run ended cancelled and its children (started ABANDON) lived on.
ROOT_CANCEL_PATCH = "cancelled-root-stops"
# Pending deliveries travel in pages (queue.PAGE_BYTES per turn input and poll answer, the rest
# fetched by the turn before it starts): by value, five ~450 KiB notices passed 2 MB together.
PAGED_PATCH = "paged-deliveries"
# A failed child's children that its log names are released by the parent that settles it, which
# keeps it resident until they closed, and a child whose parent has no running run enters its
# notice into that parent's log (a run terminated by hand drained none of its children).
ORPHANS_PATCH = "failed-run-releases-orphans"
# A run that carries resident children without a handle (an earlier run of it started them, then
# continued as new) watches them with one activity at a time (`dsh.first_closed`) and settles one
# whose run closed without its notice (terminated by hand) as a failed child with a handle is
# settled. Before it, nobody heard of such a child and its parent waited for its notice forever.
WATCH_PATCH = "handleless-children-watched"
# An agent's run starts no child past `temporal.maxRunningChildren` running at once (its start is
# refused, RUNNING_LIMIT). Before it, a start past the server's pending-children limit (2,000 by
# default) was refused by the server at every retry of the workflow task: the run stalled for good.
# Taken only at the limit, so a run below it records no marker.
RUNNING_LIMIT_PATCH = "running-children-limited"
# The limit counts the resident children an earlier run of the agent started too (carried, no
# handle here: `Residents.carried_open`), not only this run's: the server's pending-children limit
# is per run, so before it an agent could run the limit again in each run it continued as, and
# carry a ref of each (README "Large payloads"). Taken only at that limit, as the one above.
RESIDENT_LIMIT_PATCH = "resident-children-limited"
# A child signals its notice (`settled`) only when the run that started it is gone: its parent, as
# it continues as new, tells each resident child it holds a handle to (signal `parent_moved`; one
# whose run already closed is awaited instead, its result coming to this run), and a released
# child signals too (its parent may be terminated). Otherwise the result reaches the run that
# started it, which enters it. Asked at a run's first child start, whose input says so
# (`TreeInput.quiet_settle`): a child started before it, or by a run before it, always signals.
# Before it, every child signalled its notice and returned it too: one more signal, three history
# events and two workflow tasks per child, the notice entered once.
QUIET_SETTLE_PATCH = "settled-only-when-moved"
# An agent's turn runs in a workflow of its own (`dsh.turn_run`, `temporal.turnWorkflows`), so its
# run may continue as new while the turn goes on (README "A turn across runs"). Before it, the
# turn was an activity of the run, and one long turn met the run's 51,200 events.
TURN_RUN_PATCH = "turn-in-own-workflow"
# A run that began mid-turn (`Carried.turn`) holds no handle on the turn's workflow: it watches it
# with `dsh.first_closed` and hears a close without an outcome (terminated by hand, timed out) as a
# failed turn. Before it, such a run waited for the turn's `turn_ended` signal forever.
MOVED_TURN_PATCH = "moved-turn-watched"
