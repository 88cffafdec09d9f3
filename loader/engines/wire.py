"""What crosses Temporal's wire (loader/engines/README.md): workflow and activity inputs and results.

Plain dataclasses of JSON values, so temporalio's default converter carries them and workflow code
(which imports this module through the sandbox) stays free of I/O. No temporalio import here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

__all__ = [
    "CHILDREN_PAGE",
    "HEARTBEAT_TIMEOUT",
    "AgentView",
    "Answer",
    "Carried",
    "Charge",
    "Charged",
    "ChildRef",
    "ChildState",
    "ClosedRun",
    "Interrupt",
    "InterruptAt",
    "MessageChild",
    "Poll",
    "PollReply",
    "ResumeCheck",
    "ResumeFound",
    "TURN_TIMEOUT",
    "Delivery",
    "FailedRun",
    "Leftovers",
    "Homed",
    "RunSpec",
    "StartChild",
    "TreeInput",
    "TreeResult",
    "FailureLevel",
    "TurnInFlight",
    "TurnInput",
    "TurnOutcome",
    "TurnResult",
    "TurnRunInput",
    "agent_workflow_id",
    "child_workflow_id",
    "task_timeout",
]

# A turn heartbeats per model chunk and per delivery; silence this long means its worker is gone.
HEARTBEAT_TIMEOUT = timedelta(seconds=60)
# One turn's ceiling (start to close) on one worker; retried elsewhere after it.
TURN_TIMEOUT = timedelta(hours=1)
# The children one answer of query `children` holds (~450 bytes each: a query's answer stays far
# below the server's message limit however many children a run started).
CHILDREN_PAGE = 1_000


def task_timeout(run: RunSpec) -> timedelta | None:
    """An agent workflow's task timeout, as its start command gives it (None: the server's)."""
    return None if run.workflow_task_timeout is None else timedelta(seconds=run.workflow_task_timeout)


def child_workflow_id(root_id: str, child_id: str) -> str:
    """Issue 12 item 2: a continuable child's runs live under `<root>/<child>`."""
    return f"{root_id}/{child_id}"


def agent_workflow_id(root_id: str, session_id: str) -> str:
    """The workflow of any agent of the tree: the root's id is the root session id."""
    return root_id if session_id == root_id else child_workflow_id(root_id, session_id)


@dataclass
class RunSpec:
    """What every turn of one tree needs to rebuild its agent (the config, flattened)."""

    home: str
    root_id: str
    transcript: str | None = None  # a transcript's path: the replay provider runs in the activity
    fences_allowed: bool = False
    fences: bool = False  # the transcript has fences and they may run: the root keeps a fact board
    # The agents a fence condition names (fences.named_agents): only their facts go on the board.
    # None (a run started before this field): every agent's.
    fence_agents: list[str] | None = None
    fence_timeout: float = 10.0
    model: str = "replay"
    system_prompt: str = ""
    max_parallel_tool_calls: int = 10
    max_steps_per_turn: int = 100
    max_tokens: int | None = None
    temperature: float | None = None
    max_depth: int = 3
    report_delivery: str = "wakeup"
    batch_delay_ms: int = 0
    fsync: bool = False
    task_queue: str = "dsh"
    parked: str = "wait"  # run.parked (SPEC §17.2): what a stalled tree does, `wait` or `release`
    continue_as_new_after: int | None = None  # temporal.continueAsNewAfter: history events per run
    # temporal.continueAsNewUpdates: updates one run takes before it continues as new between turns
    # (a server caps a run at `history.maxTotalUpdates`, 2,000 by default; a turn needs headroom).
    continue_as_new_updates: int = 1_000
    heartbeat_seconds: float = HEARTBEAT_TIMEOUT.total_seconds()  # temporal.heartbeatTimeoutSeconds
    # temporal.maxRunningChildren: an agent's run starts no more children at once (the server's
    # pending-children limit, 2,000 by default, would refuse the start command and stall the run).
    max_running_children: int = 2_000
    # temporal.turnWorkflows: whose turns run as a workflow of their own (`dsh.turn_run`), so the
    # agent's run may continue as new while the turn goes on: `root`, `all` or `none` (README
    # "A turn across runs"; `none`, the default, also for runs started before this field).
    turn_workflows: str = "none"
    # temporal.workflowTaskTimeoutSeconds: each agent workflow's task timeout (None: the server's).
    workflow_task_timeout: float | None = None
    # No transcript: the worker's live provider (its own model.* settings and key; README "Live
    # providers"). Only the model's name crosses the wire, never an endpoint's key.
    max_children: int = 200  # limits.*: the tree's run budget, kept by the root workflow
    max_requests: int = 2_000
    max_tokens_total: int = 2_000_000


@dataclass
class Delivery:
    """One accepted message for an agent. `send`: how it enters the agent's inbox — `followup`,
    `steer` or `inject` (SPEC §6.2), or `notice` (followup when the agent is idle, steer when it
    runs: §9.4). Only `inject` does not wake an idle agent."""

    message: dict[str, Any]
    send: Literal["followup", "steer", "inject", "notice"] = "followup"

    @property
    def waking(self) -> bool:
        return self.send != "inject"


@dataclass
class TreeInput:
    """One agent workflow run: the root (no `parent_id`) or one epoch of a continuable child."""

    run: RunSpec
    session_id: str
    deliveries: list[Delivery] = field(default_factory=list)
    parent_id: str | None = None
    depth: int = 0
    descriptor: dict[str, Any] | None = None
    epoch: int | None = None
    cwd: str | None = None
    ancestors: list[str] = field(default_factory=list)  # the live lineage above: interrupt authority (§10.2)
    carried: Carried | None = None  # a run continued as new: the bookkeeping of the runs before
    # Homes (README "Homes"): the queue of the home that holds this session's log (None: not known
    # yet, its create activity finds one; or workers without a home queue), and the child's header
    # as its parent's `subagent` made it (its create activity writes it).
    home_queue: str | None = None
    header: dict[str, Any] | None = None
    known_homes: list[str] = field(default_factory=list)  # home queues its parent knew of (pinning.py)
    parent_queue: str | None = None  # the home queue of the parent's log (a notice its closed run never read)
    # An earlier run of this session ran its create activity, which answered no home queue (workers
    # without a home): its log is where the shared queue's workers write, so none runs again.
    claimed: bool = False
    # Its parent tells it when the run that started it continues as new (QUIET_SETTLE_PATCH): until
    # then its result reaches that run, and it signals its notice only once told (or released).
    # False (started by a run before the patch): it always signals.
    quiet_settle: bool = False


@dataclass
class Carried:
    """What an agent's workflow passes to the run it continues as (its residency goes on): the
    queue's state and what its result accumulates. `deliveries` of the new run are the pending
    ones (`deliveries[handed:]`); no turn runs when it continues. Its resident children go on
    (started `ABANDON`, they signal their notice to the current run), and a root passes on the
    tree's budget, the charges' answers and the fence board."""

    parked: list[str] = field(default_factory=list)
    # The resident children's refs (a run that carried every child it ever started met the 2 MB
    # payload limit at ~8,000 children): the run's `children` query answers these and its own
    # starts, and earlier runs answer theirs (control.workflow_children).
    children: list[ChildRef] = field(default_factory=list)
    told_stalled: ChildState | None = None
    violations: list[dict[str, Any]] = field(default_factory=list)
    fences_engaged: list[bool] = field(default_factory=list)
    agent_key: str | None = None
    runs: int = 1  # runs of this residency so far
    seen: int = 0  # the parent's follow-ups received so far (ChildState.seen)
    resident: list[str] = field(default_factory=list)  # children whose notice is still due
    sent: dict[str, int] = field(default_factory=dict)  # resident child -> follow-ups delivered to it
    stalled: list[ChildState] = field(default_factory=list)  # what resident children last told
    budget: list[int] = field(default_factory=list)  # the root: [children, requests, tokens] counted
    exhausted: str | None = None  # the root: RunBudget.exhausted
    charged: dict[str, list[Any]] = field(default_factory=dict)  # the root: charge source -> [batch, answers]
    facts: list[list[Any]] = field(default_factory=list)  # the root: the fence board, in order
    fact_last: list[list[Any]] = field(default_factory=list)  # the root: [publisher, its last fact's index]
    quiet: int = 0  # the first `quiet` deliveries wake no one (a turn that failed for good had them)
    homes: dict[str, str] = field(default_factory=dict)  # child -> the home queue holding its log
    tree_homes: list[str] = field(default_factory=list)  # the root: every home queue of the tree
    heard_homes: dict[str, list[str]] = field(default_factory=dict)  # resident child -> the homes its last run knew
    heard_any: list[str] = field(default_factory=list)  # what settled children's last runs knew, together
    epochs: dict[str, int] = field(default_factory=dict)  # resident child -> the epoch its run is (WATCH_PATCH)
    homeless: list[str] = field(default_factory=list)  # children claimed with no home queue (CLAIM_KEPT_PATCH)
    parent_moved: bool = False  # a child: the parent's run that started this epoch is gone (QUIET_SETTLE_PATCH)
    turn: TurnInFlight | None = None  # the run continued as new mid-turn (TURN_RUN_PATCH): that turn goes on


@dataclass
class TurnInFlight:
    """A turn running in its own workflow (`dsh.turn_run`) while its agent's run continues as new
    (README "A turn across runs"). The new run's deliveries start at `base`, the index up to which
    the turn said its log holds what it took (`Poll.durable`); indices stay the old run's, so the
    turn's polls go on unchanged."""

    seq: int  # the turn's number (Poll.seq): the new run's `ended` starts here
    offset: int  # its TurnInput.offset: `handed` is `offset + taken` once it ends
    base: int  # the index of the new run's deliveries[0]
    turn_id: str  # its workflow's id (told `agent_moved`: it signals its outcome, `turn_ended`)
    interrupts: list[InterruptAt] = field(default_factory=list)  # accepted for it so far, in order


@dataclass
class ChildRef:
    """A child a workflow run started or resumed (query `children`; a resident one goes into each
    turn's input, and with it into the run it continues as)."""

    child_id: str
    descriptor: dict[str, Any]
    header: dict[str, Any] | None = None  # its log's header (list_agents lists it from any home)


@dataclass
class StartChild:
    """`subagent` inside a turn asks its workflow to start a child (update `start_child`)."""

    child_id: str
    descriptor: dict[str, Any]
    prompt: dict[str, Any]  # the prompt message, id included
    depth: int
    header: dict[str, Any] | None = None  # not written by the caller: the child's create activity writes it


@dataclass
class TurnInput:
    agent: TreeInput
    deliveries: list[Delivery]
    offset: int  # index of deliveries[0] in the workflow's list: the long-poll continues from here
    seq: int = 0  # which turn activity of this run: a poll of an ended turn returns at once
    parked: list[str] = field(default_factory=list)  # waking messages the last turn left queued (§10.3)
    # The resident children: `list_agents` lists those whose logs are on other homes, and
    # `{{child:...}}` binds them (and every child the agent's log shows it spawned). Only the
    # resident ones: bounded by what runs at once, not by every child the agent ever started.
    children: list[ChildRef] = field(default_factory=list)
    running: int = 0  # this run's child runs open as the turn starts (`temporal.maxRunningChildren`)
    release: bool = False  # the tree releases parked work: cancel the agent, clearing its inbox (§17.2)
    # Deliveries pending past `deliveries` (a page: PAGE_BYTES), fetched by the turn's poll before
    # it sends any, so a turn starts with every pending one, as by value (README "Large payloads").
    more: int = 0
    # Homes: a child's log is made by its own create activity on its own home, not by this turn.
    children_elsewhere: bool = False
    # The turn runs in a workflow of its own (mid_turn.py): one of its agent's run's pending
    # children, so one fewer agent child may run while it does (`temporal.maxRunningChildren`).
    own_workflow: bool = False


@dataclass
class Poll:
    """The turn activity's long-poll (update `deliveries_after`): deliveries past `after` and
    interrupts past the `interrupts` this turn applied, or none once turn `seq` has ended."""

    seq: int
    after: int
    interrupts: int = 0
    # The turn's log holds every delivery before `after` (flushed): its agent's run may continue as
    # new mid-turn from there (`PollReply.moved`; README "A turn across runs").
    durable: bool = False
    pages: bool = False  # the rest of the turn's input (TurnInput.more): answered whatever the run does


@dataclass
class InterruptAt:
    """An interrupt of turn `seq`, accepted after `at` deliveries: the turn applies it between
    the deliveries it arrived between, so a follow-up sent before it is kept parked (§10.3) and
    one sent after it resumes the queue."""

    at: int
    cause: dict[str, Any]


@dataclass
class PollReply:
    deliveries: list[Delivery] = field(default_factory=list)
    interrupts: list[InterruptAt] = field(default_factory=list)
    # The run has taken `temporal.continueAsNewUpdates` updates and the turn cannot end it now: the
    # turn asks by query from here (query `deliveries_now`), so a long turn's polls do not spend
    # the updates a server allows one run (`history.maxTotalUpdates`, 2,000 by default).
    spent: bool = False
    ended: bool = False  # the turn has ended (a query's answer; the update's is empty then)
    # The run is about to continue as new mid-turn: the turn flushes its log and says so by an
    # update poll (`Poll.durable`), then asks by query until a run answers that is not moving.
    moved: bool = False
    # The run holds deliveries from this index on (a run continued as new mid-turn): the ones
    # before it are in the turn's log, so a retried turn counts them taken.
    base: int = 0


# The error type of a board long-poll refused because its run's updates are spent (its validator).
BOARD_SPENT = "BOARD_SPENT"


@dataclass
class BoardView:
    """The fence board past an index, by query (`fence_board_since`): read by a mirror in place
    of the long-poll update while `spent` (the run has taken `temporal.continueAsNewUpdates`
    updates: its board polls then leave the rest of the server's cap to starts and messages) or
    while the server refuses the update."""

    facts: list[list[Any]] = field(default_factory=list)
    spent: bool = False


@dataclass
class Interrupt:
    """An interrupt request (SPEC §10.1): `parent` from `interrupt_agent` (`caller` is the live
    ancestor's id), `user` from `dsh interrupt` (`caller` is the parent address presented)."""

    kind: Literal["parent", "user"]
    caller: str


@dataclass
class MessageChild:
    """`send_message` (or `dsh send`) to a child of the workflow's agent (update `message_child`)."""

    child_id: str
    message: dict[str, Any]


@dataclass
class Answer:
    """An update's outcome: `status`, or a typed refusal the caller raises as a `SubagentError`
    (`code`, and `text`: the texts.py id; workflow code renders nothing)."""

    status: str = ""
    code: str | None = None
    text: str = ""


@dataclass
class ResumeCheck:
    """The cold-resume header checks (§8.7), read-only, in activity `dsh.resume_check`."""

    home: str
    parent_id: str
    child_id: str


@dataclass
class FailedRun:
    """A child's run failed (`ChildWorkflowError`): activity `dsh.settle_failed` settles its epoch
    from the log (settle.py); `failure` is the error chain the parent's history holds."""

    home: str
    child_id: str
    epoch: int | None
    failure: str


@dataclass
class ClosedRun:
    """Activity `dsh.first_closed`'s answer: the first watched workflow whose run closed other than
    completed (terminated, cancelled, timed out, failed, gone), with how; `workflow_id` None: every
    one closed completed (each signalled its notice before it returned)."""

    workflow_id: str | None = None
    status: str = ""


@dataclass
class Leftovers:
    """A root whose run fails with deliveries it never read (its drained children's notices, what
    its failed turn was handed): activity `dsh.enter_leftovers` enters them into its log as
    injects, as a closing local root's inbox takes a notice (SPEC §9.2 step 4), so nothing
    accepted is lost."""

    home: str
    session_id: str
    messages: list[dict[str, Any]]


@dataclass
class ResumeFound:
    code: str | None = None
    text: str = ""
    descriptor: dict[str, Any] | None = None
    depth: int = 0
    epoch: int = 1
    header: dict[str, Any] | None = None
    home_queue: str | None = None  # the home queue of the worker that found the log (README "Homes")


@dataclass
class Homed:
    """Activity `dsh.create_session`'s answer: the home queue of the worker that holds the log now
    (None: a worker without a home queue, every home is the submitter's)."""

    home_queue: str | None = None


@dataclass
class ChildState:
    """A child tells its parent whether it is stalled (idle, nothing pending, parked or waiting
    only on stalled children: §17.2), with the parked agents below and including it."""

    child_id: str
    stalled: bool
    parked: list[str] = field(default_factory=list)
    # How many of the parent's follow-ups this residency had received when it decided: a report
    # decided before the parent's latest follow-up arrived is stale (None: a pre-count history).
    seen: int | None = None


@dataclass
class AgentView:
    """Query `view` of one agent's workflow: what the socket's `run.status` and `subagent.list`
    read of a live agent (SPEC §18.2), and the stall the client reports under `run.parked: wait`.
    A query adds nothing to history, so a client may ask as often as it likes."""

    session_id: str
    parent_id: str | None
    label: str | None  # the descriptor's (a child), None for the root
    depth: int
    status: str  # `list_agents`' status (§12.2): running, parked, idle, ready once closing
    resident: list[str] = field(default_factory=list)  # children whose settlement is still due
    stalled: bool = False  # every agent at and below it idle with a child parked (§17.2)
    parked: list[str] = field(default_factory=list)  # the parked agents of that stall
    shutting_down: bool = False  # releasing its tree, or its run is closing


@dataclass
class TurnResult:
    taken: int  # deliveries consumed, counted from TurnInput.offset
    stop_reason: str
    notice: dict[str, Any] | None = None  # a child: the settlement notice its epoch owes, as of now
    output: str = ""  # the root: the run outcome's output (§7.4)
    error: dict[str, Any] | None = None
    violations: list[dict[str, Any]] = field(default_factory=list)
    fences_engaged: list[bool] = field(default_factory=list)
    agent_key: str | None = None  # the transcript script this session is bound to
    parked: list[str] = field(default_factory=list)  # waking messages still queued in an idle agent
    output_in_log: bool = False  # the root's output is too large for a payload: read it from its log


@dataclass
class TurnRunInput:
    """Workflow `dsh.turn_run` (turn_run.py): one turn of an agent, whose workflow it reports to."""

    turn: TurnInput
    agent_workflow: str
    task_queue: str | None = None  # the queue of the agent's log's home (None: the workflow's)


@dataclass
class FailureLevel:
    """One level of a failure's chain, outermost first (`TurnOutcome.failure`), as history keeps it."""

    message: str
    type: str | None = None


@dataclass
class TurnOutcome:
    """How a turn in its own workflow ended: its result, or its activity's failure chain (the
    agent's run raises it as the activity's failure would have been raised)."""

    seq: int
    result: TurnResult | None = None
    failure: list[FailureLevel] = field(default_factory=list)


@dataclass
class Charge:
    """A turn charges the tree's run budget (update `charge` on the root workflow): one spawn
    (`children`), one model request (`requests`) or a reply's `tokens`."""

    kind: Literal["children", "requests", "tokens"]
    tokens: int = 0


@dataclass
class Charged:
    """The root's answer: `refused` names the exhausted kind (the charge was not counted)."""

    refused: Literal["children", "requests", "tokens"] | None = None


@dataclass
class TreeResult:
    """A workflow run's result. For a child it is the settlement notice (issue 12 item 2)."""

    session_id: str
    stop_reason: str
    notice: dict[str, Any] | None = None
    output: str = ""
    error: dict[str, Any] | None = None
    violations: list[dict[str, Any]] = field(default_factory=list)
    fences_engaged: list[bool] = field(default_factory=list)
    agent_key: str | None = None
    epoch: int | None = None
    released: list[str] = field(default_factory=list)  # the root: parked children released (§17.2)
    budget: dict[str, Any] = field(default_factory=dict)  # the root: RunBudget.summary() of the tree
    output_in_log: bool = False  # the root: `output` is not carried (over NOTICE_LIMIT), its log has it
    # dsh.settle_failed: the children the failed run's log started or messaged (any may still be
    # resident: a run terminated by hand drains none), released by the parent that settles it.
    spawned: list[str] = field(default_factory=list)
    home_queue: str | None = None  # the queue of the home holding this session's log (README "Homes")
    # The home queues this run knew (its children's among them): its next epoch, a new run that
    # never heard its children's results, looks for their logs there (README "Homes").
    known_homes: list[str] = field(default_factory=list)
    claimed: bool = False  # its create activity ran, answering `home_queue` (None: workers without a home)
