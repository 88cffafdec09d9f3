"""Where a session's log lives: the home queues of one agent's workflow run (loader/engines/README.md
"Homes: workers without a shared home"). Workflow code (deterministic, no I/O; it may import only
`wire`); the commands and handlers stay on `AgentWorkflow`, which reads and sets these fields.

Each worker with a home serves the shared task queue and its home queue (`<taskQueue>@<home id>`).
A session's first activity, `dsh.create_session` on the shared queue (so a fan-out spreads over the
homes), claims a home for its log: it answers its worker's home queue and writes nothing. Every
activity that reads or writes that log runs on that queue (`queue()`): the turns (the first one
makes the log), the failed-run settlement, the cold-resume check of a child (`of(child)`), and the
child's next epoch starts pinned to it. A claim retried after its worker died leaves nothing on
the first home, so the log is made in exactly one.

Invariants:
- `mine` is set once (by the create activity, or given: a cold resume, a run continued as new) and
  never changes: a session's log is in exactly one home;
- `children[child]` is the home queue a child's result (or its `homed` signal, to the root) named;
  carried across continue-as-new for the resident children (a settled one's home is found again by
  its resume checks, each known home in turn);
- `tree` (the root) holds every home queue a session of the tree reported, in the order learnt: the
  server stream reads a page on each (stream.py). A child tells the root only of a home its parent
  did not know (`TreeInput.known_homes`), so a tree on one home sends no signal for it.
- `heard[child]` is the homes a child's last run knew (its result); its next epoch starts knowing
  them, so a parent in a later epoch finds the logs of its earlier epochs' children (`heard_any`,
  all of them together, for a child settled before this run continued as new);
- `claimed`: the create activity ran for this session, in this run or an earlier one (its answer
  may be None: workers without a home). A claimed session runs it never again: a continued run is
  told (`TreeInput.claimed`), and so is a child's later epoch (`homeless`: the children whose
  result or resume check said their log has no home queue). Before `CLAIM_KEPT_PATCH`, an answer
  of None left the session unclaimed, and every later run and epoch ran the activity again (one
  wasted activity each; with workers with and without homes, a later run could be pinned to a
  home without its log);
- disabled (`HOMES_PATCH` absent: a history recorded before it), every queue is None: the
  workflow's own task queue, as before.
"""

from __future__ import annotations

from collections.abc import Container
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy

from dsh.loader.engines.wire import Carried, Homed, TreeInput

__all__ = ["CHILD_HOMES_PATCH", "CLAIM_KEPT_PATCH", "CREATE_ACTIVITY", "HOMES_PATCH", "Homes", "pin"]

# The patch that pins each session's activities to the home queue of its log (README "Homes").
HOMES_PATCH = "home-queues"
# A child's later epoch is told the homes its last run knew (`TreeResult.known_homes`), so it finds
# the logs of the children of its earlier epochs; before it, such a child was NOT_RESUMABLE.
CHILD_HOMES_PATCH = "later-epoch-knows-child-homes"
# A create activity that answered no home queue still claims the session (`Homes.claimed`), so its
# later runs and epochs run none (engines README "Not yet" item 5, fixed).
CLAIM_KEPT_PATCH = "homeless-claim-kept"
CREATE_ACTIVITY = "dsh.create_session"
CREATE_TIMEOUT = timedelta(seconds=30)
CREATE_RETRY = RetryPolicy(maximum_attempts=5)


class Homes:
    """This session's home queue, its children's, and (the root) the tree's."""

    def __init__(self, input: TreeInput, carried: Carried, *, enabled: bool, keep_claim: bool) -> None:
        self.enabled = enabled
        self.keep_claim = enabled and keep_claim  # CLAIM_KEPT_PATCH
        self.mine: str | None = input.home_queue
        self.claimed = input.home_queue is not None or input.claimed
        self.homeless: set[str] = set(carried.homeless)
        self.children: dict[str, str] = dict(carried.homes)
        self.tree: list[str] = list(carried.tree_homes)
        self.known: list[str] = list(input.known_homes)
        self.heard: dict[str, list[str]] = {k: list(v) for k, v in carried.heard_homes.items()}
        self.heard_any: list[str] = list(carried.heard_any)  # the children's not carried one by one
        if self.mine is not None:
            self.note(self.mine)

    def pending(self) -> bool:
        """The create activity has yet to run (and find the log a home)."""
        return self.enabled and not self.claimed

    def pin(self, queue: str | None) -> bool:
        """The create activity's answer; True when the root should hear of this home."""
        self.claimed = self.keep_claim or queue is not None
        if queue is None:
            return False
        self.mine = queue
        fresh = queue not in self.known
        self.note(queue)
        return fresh

    def note(self, queue: str) -> None:
        if queue not in self.known:
            self.known.append(queue)
        if queue not in self.tree:
            self.tree.append(queue)

    def learn(self, child_id: str, queue: str | None, *, claimed: bool = False) -> None:
        """A child's log is on `queue` (its result or its `homed` signal said so); `claimed` with
        no queue: its log has no home queue (workers without a home), its next epoch creates none."""
        if queue is not None and self.enabled:
            self.children[child_id] = queue
            self.homeless.discard(child_id)
            self.note(queue)
        elif claimed and self.keep_claim and child_id not in self.children:
            self.homeless.add(child_id)

    def heard_from(self, child_id: str, known: list[str]) -> None:
        """The homes a child's run knew (its result): its next epoch is told them (`known_for`)."""
        if known and self.enabled:
            self.heard[child_id] = list(known)

    def known_for(self, child_id: str, epoch: int) -> list[str]:
        """The `known_homes` of a child's run: this run's, and for a later epoch the homes its last
        run knew, so its resume checks find the children of its earlier epochs (CHILD_HOMES_PATCH).
        A child settled before this run continued as new: the homes any such child's last run knew
        (a superset: its checks may ask a home more). A run recorded before `heard_any` has none,
        so it asks the patch exactly where it did."""
        known = list(self.known)
        heard = self.heard.get(child_id, self.heard_any)
        if epoch > 1 and heard and workflow.patched(CHILD_HOMES_PATCH):
            known += [q for q in heard if q not in known]
        return known

    def queue(self) -> str | None:
        """The task queue of this session's own activities (None: the workflow's)."""
        return self.mine if self.enabled else None

    def of(self, child_id: str) -> str | None:
        """The task queue of the activities that read or write a child's log (None: the shared
        one; a child whose home this run never heard of, e.g. one of an earlier epoch)."""
        return self.children.get(child_id) if self.enabled else None

    def checks(self, child_id: str) -> list[str | None]:
        """Where to look for a child's log before a cold resume: its home when known, else each home
        this run knows of in turn (a parent in a later epoch never heard its earlier children's);
        None: the shared queue (disabled, or no home known)."""
        known = self.of(child_id)
        if known is not None:
            return [known]
        if child_id in self.homeless:
            return [None]
        return list(self.known) if self.enabled and self.known else [None]

    def carry(self, resident: Container[str]) -> dict[str, Any]:
        """The `Carried` fields of the table, bounded by the `resident` children and the homes
        (README "Large payloads"): each map grew by an entry for every child ever settled. A later
        cold resume of a settled child learns its home and claim again from its resume check before
        it starts the child (`learn`): `checks` asks each known home in turn (`known` holds every
        home a child reported), or the shared queue when none is known (workers without a home).
        What its last run knew goes into `heard_any`, one list for all."""
        heard_any = list(self.heard_any)
        for child_id, queues in self.heard.items():
            if child_id not in resident:
                heard_any += [q for q in queues if q not in heard_any]
        return {"homes": {c: q for c, q in self.children.items() if c in resident}, "tree_homes": list(self.tree),
                "heard_homes": {c: list(v) for c, v in self.heard.items() if c in resident}, "heard_any": heard_any,
                "homeless": sorted(c for c in self.homeless if c in resident)}

    def claimed_child(self, child_id: str) -> bool:
        """A child's next epoch is told its create activity ran (its log has no home queue)."""
        return child_id in self.homeless


async def pin(homes: Homes, input: TreeInput) -> None:
    """Run the session's create activity (on the shared queue: any home may take it) and pin the
    session to the home it answers; a home the parent did not know is told to the root (signal
    `homed`), whose stream reads a page on each home."""
    found: Homed = await workflow.execute_activity(CREATE_ACTIVITY, input, result_type=Homed,
                                                   start_to_close_timeout=CREATE_TIMEOUT, retry_policy=CREATE_RETRY)
    if homes.pin(found.home_queue) and input.parent_id is not None:
        root = workflow.get_external_workflow_handle(input.run.root_id)
        await root.signal("homed", args=[input.session_id, found.home_queue])
