"""The design notes' ordering and bookkeeping rules (issue 14), one test or group per rule.

The notes promise "reverse the order or drop the bookkeeping, and a test fails". These are the rules
the suite did not yet pin. Each test drives the real runtime (a `Tree` over a tmp home, replay
scripts at the model seam, pre-step holds for ordering) and was checked by breaking its rule in the
code and watching it fail; the mutation used is named in each docstring.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dsh.loader.agent import Agent, fold_consumed_work, user_message
from dsh.loader.errors import SubagentError
from dsh.loader.host import ControlServer
from dsh.loader.subagents import Activation, UserAuthority, drain_children, interrupt, settlement_message
from dsh.loader.subagents.notice import SUMMARY_LIMIT
from dsh.loader.texts import render
from tree_kit import (
    HANG,
    RecordingAgent,
    TreeWatch,
    build,
    calls,
    fresh_signal,
    inserts,
    on_agent,
    reach,
    spawn,
    step_batches,
    text,
    turn_ends,
    entered,
)


USER = {"kind": "user"}
COMPLETED = {"kind": "completed"}
PROVIDER_ERROR = {"error": {"code": "PROVIDER_HTTP", "message": "upstream broke"}}


def aborted(cause: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "aborted", "reason": cause}


def notices(agent: Agent) -> list[tuple[str, dict[str, Any]]]:
    """`(target, notice)` for every settlement notice inserted into `agent`'s inbox, in log order."""
    return [(t, m) for t, m in inserts(agent) if m["source"]["kind"] == "subagent-settled"]


def assert_script_consumed(tree: Any) -> None:
    tree.provider.inner.finish_checks()
    assert tree.provider.inner.violations == []


# -- rule 1 ------------------------------------------------------------------------------------------


async def test_notice_to_a_running_parent_whose_turn_was_cancelled_opens_its_own_turn(make_tree):
    """Rule 1 (§9.4, "steer, not inject, for a running parent"): the root is running but its turn is
    already cancelled (held at a pre-step that ignores the abort) when its child settles. The notice
    is steered, so §6.2 redirects it to next-turn and latches the wake: after the cancelled driver
    converges, the notice opens turn 2 on its own. An inject would park it in next-step with no wake.
    Broken by: `parent.inject` instead of `parent.steer` in notice.py."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("NOTED")]},
        "child": {"spawnedBy": "sa", "replies": [text("DONE")]},
    })
    root_held = watch.hold("root", turn=1, step=2, respect_abort=False)
    child_held = watch.hold("child")
    root.followup(user_message("go"))
    await reach(root_held.reached)
    await reach(child_held.reached)

    try:
        root.cancel(USER, keep_inbox=True)
        assert root.status == "running"  # cancelled, not yet converged
        child_held.release()
        await reach(watch.ended("child"))
        [(target, notice)] = notices(root)
        assert target == "next-turn"
    finally:
        root_held.release()  # this hold ignores the abort: a failed check must not pin teardown
    await reach(tree.wait_quiet(root))
    assert turn_ends(root) == [aborted(USER), COMPLETED]
    turn, step, batch = step_batches(root)[-1]
    assert (turn, step, [m["id"] for m in batch]) == (2, 1, [notice["id"]])
    assert_script_consumed(tree)


# -- rule 2 ------------------------------------------------------------------------------------------


async def _reject(_ctx: Any) -> str:
    return "reject"


@pytest.mark.parametrize(
    ("setup", "recorded", "stop"),
    [
        pytest.param("provider-error", "error", "error", id="error"),
        pytest.param("rejected", "blocked", "refusal", id="refusal"),
    ],
)
async def test_stopping_a_child_that_already_failed_keeps_the_failure(make_tree, setup, recorded, stop):
    """Rule 2 (§7.2, priority in the fold): the child's first turn ends `error` (provider failure) or
    `blocked`; a second prompt stays queued (the driver stops after such a turn). A selected drain
    then cancels that pending work, which the fold records as dropped. The recorded failure still
    wins: the notice says `error` / `refusal`, not `aborted`.
    Broken by: in fold.py, letting `dropped_unrun` win in `epoch_stop_reason` (checked first), and,
    separately, by resetting `end` when a canceled splice drops work."""
    replies = [PROVIDER_ERROR] if setup == "provider-error" else []
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED")]},
        "child": {"order": 1, "replies": replies},
    })
    if setup == "rejected":
        on_agent(tree, "child", lambda agent: agent.pre_step.add(_reject))
    held = watch.hold("child")
    child_id, _ = await tree.manager.start_continuable(root, "c", "first", "c", fresh_signal())
    child = watch.agents["child"]
    await reach(held.reached)
    await tree.manager.followup(root, child_id, "second", USER, fresh_signal())
    held.release()
    await reach(watch.idle_after_run("child"))
    a = tree.manager.activations[child_id]
    assert a.parked and [e["kind"] for e in turn_ends(child)] == [recorded]

    await reach(drain_children(tree.manager, root, [child_id]))
    canceled = [e["data"] for e in child.session.events
                if e["type"] == "agent/inbox/spliced" and e["data"].get("outcome") == "canceled"]
    assert [c["removedCount"] for c in canceled] == [1]  # the queued prompt, dropped unrun
    [(_, notice)] = notices(root)
    assert notice["source"]["stopReason"] == stop
    await reach(tree.wait_quiet(root))
    assert_script_consumed(tree)


def _event(seq: int, type_: str, **data: Any) -> dict[str, Any]:
    return {"type": type_, "seq": seq, "time": 0, "data": data}


def test_a_recorded_token_limit_outranks_a_later_cancel_of_pending_work():
    """Rule 2 (§7.2), the token-limit half: a driver continues after a `max-tokens` turn when work
    is queued, so the runtime cannot leave pending work behind one; the fold still must rank it above
    a later drop. Broken by the same two fold.py mutations as above."""
    from dsh.loader.agent import epoch_stop_reason

    events = [
        _event(0, "turn/start", turn=1),
        _event(1, "agent/inbox/spliced", target="next-turn", start=0, inserted=[], removedCount=1),
        _event(2, "step/start", turn=1, step=1),
        _event(3, "step/end", turn=1, step=1),
        _event(4, "turn/end", turn=1, reason={"kind": "max-tokens"}),
        _event(5, "agent/inbox/spliced", target="next-turn", start=0, inserted=[], removedCount=1,
               outcome="canceled"),
    ]
    fold = fold_consumed_work(events)
    assert fold.dropped_unrun and fold.end_kind == "max-tokens"
    assert epoch_stop_reason(fold) == "max-tokens"


# -- rule 3 ------------------------------------------------------------------------------------------


async def test_a_second_residency_reads_its_outcome_from_its_own_epoch(make_tree):
    """Rule 3 (§8.11 step 8, `events[boundary:]`): epoch 1 of the child ends `error`. Epoch 2 is cold
    resumed by a followup that a status listener cancels before any turn opens (§6.11: "no turn at
    all, a default cancel removes the message"). Epoch 2's own events hold only that dropped prompt,
    so its notice says `aborted`; read over the whole log it would repeat epoch 1's `error`.
    Broken by: folding `child.session.events` instead of `events[a.boundary:]` in teardown.py."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED 1"), text("NOTED 2")]},
        "child": {"order": 1, "replies": [PROVIDER_ERROR]},
    })
    epochs: list[Agent] = []

    def install(agent: Agent) -> None:
        epochs.append(agent)
        if len(epochs) == 2:
            agent.events.on("agent/status", lambda p: p["status"] == "running" and agent.cancel({"kind": "hook"}))

    on_agent(tree, "child", install)
    child_id, _ = await tree.manager.start_continuable(root, "c", "first", "c", fresh_signal())
    await reach(watch.ended("child"))
    await reach(tree.wait_quiet(root))

    await tree.manager.followup(root, child_id, "second", USER, fresh_signal())
    await reach(tree.wait_quiet(root))

    assert len(epochs) == 2
    assert [e["kind"] for e in turn_ends(epochs[1])] == ["error"]  # epoch 2 opened no turn
    assert [(m["source"]["senderSessionId"], m["source"]["stopReason"]) for _, m in notices(root)] == [
        (child_id, "error"), (child_id, "aborted")
    ]
    assert [(e["epoch"], e["stopReason"]) for e in watch.ends] == [(1, "error"), (2, "aborted")]
    assert_script_consumed(tree)


# -- rule 4 ------------------------------------------------------------------------------------------


async def test_a_child_whose_first_delivery_was_refused_sends_no_notice(make_tree):
    """Rule 4 (§8.9, `announced`): the child materializes, but its inbox refuses the initial prompt.
    Start fails with that error and the rolled-back Activation is disposed without a notice: the
    parent's inbox never hears of a child that accepted no work.
    Broken by: dropping the `if not a.announced: return` guard in notice.py."""
    tree, watch, root = await build(make_tree, {"root": {"replies": []}, "child": {"order": 1, "replies": []}})
    refusal = OSError("inbox refused the prompt")
    on_agent(tree, "child", lambda agent: setattr(agent, "fail_sends", refusal))

    with pytest.raises(OSError) as info:
        await tree.manager.start_continuable(root, "c", "do it", "c", fresh_signal())

    assert info.value is refusal
    child = watch.agents["child"]
    assert child.disposed and child.id not in tree.registry  # the teardown ran to its end
    assert tree.manager.activations == {}
    assert notices(root) == [] and root.status == "idle"
    assert [e["type"] for e in root.session.events if e["type"].startswith("turn/")] == []


# -- rule 5 ------------------------------------------------------------------------------------------


class EveryTick:
    """Calls `check` once per event-loop iteration: a callback that re-schedules itself with
    `call_soon`. Any state a task leaves visible across one of its awaits is seen by it, without
    sleeping: the ready queue is never empty while it runs."""

    def __init__(self, check: Callable[[], None]) -> None:
        self.check = check
        self.ticks = 0
        self._loop = asyncio.get_running_loop()
        self._handle: asyncio.Handle | None = None

    def start(self) -> None:
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.ticks += 1
        self.check()
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()


async def test_no_observer_sees_a_settled_child_without_its_notice_or_still_owned(make_tree):
    """Rule 5 (§4.2 S6 is one synchronous span): root → middle → inner. An observer runs on every
    loop iteration while inner and then middle settle and checks two facts: an announced Activation
    that left the map has its notice in its live parent's inbox ("no observer can see no Activation
    and no notice"), and every owned child id still names an Activation (release happens in the same
    span, so no owner is left pointing at a settled child, nor judged settled before the notice).
    Broken by: `await asyncio.sleep(0)` between the Activation's removal and `notify_settlement`,
    and, separately, between `notify_settlement` and `release_ownership`, in teardown.py."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [text("NOTED")]},
        "middle": {"order": 1, "replies": [calls(spawn("si")), text("WAITING"), text("GOT_INNER")]},
        "inner": {"spawnedBy": "si", "replies": [text("INNER_DONE")]},
    })
    inner_held = watch.hold("inner")
    seen: dict[str, Activation] = {}
    settled: set[str] = set()
    violations: list[str] = []

    def check() -> None:
        activations = tree.manager.activations
        for cid, a in activations.items():
            seen.setdefault(cid, a)
            for owned in a.owned_children:
                if owned not in activations:
                    violations.append(f"{cid} still owns {owned}, which has no Activation")
        for cid, a in seen.items():
            if cid in activations or cid in settled or not a.announced:
                continue
            parent = tree.registry.get(a.parent_session)
            if parent is not None and not any(m["source"]["senderSessionId"] == cid for _, m in notices(parent)):
                violations.append(f"{cid} has no Activation and no notice")
            else:
                settled.add(cid)

    probe = EveryTick(check)
    probe.start()
    try:
        middle_id, _ = await tree.manager.start_continuable(root, "m", "delegate", "m", fresh_signal())
        await reach(inner_held.reached)
        await reach(watch.idle_after_run("middle"))
        inner_held.release()
        await reach(tree.wait_quiet(root))
    finally:
        probe.stop()

    inner_id = watch.id_of("inner")
    assert violations == []
    assert settled == {middle_id, inner_id} and probe.ticks > 0
    assert [m["source"]["senderSessionId"] for _, m in notices(watch.agents["middle"])] == [inner_id]
    assert [m["source"]["senderSessionId"] for _, m in notices(root)] == [middle_id]
    assert_script_consumed(tree)


# -- rule 6 ------------------------------------------------------------------------------------------


async def test_user_interrupt_neither_cascades_nor_releases_the_targets_ownership(make_tree):
    """Rule 6 (§10, user authority): root → a → b → c, all running. A user interrupt of b (addressed
    under its direct parent a) cancels b alone with `(user, keep_inbox)`: c gets no cancel and keeps
    running, a still owns b and b still owns c; b parks as a `waiting` owner.
    Broken by: in interrupt.py's user branch, cancelling b's owned children too, and, separately,
    calling `release_ownership(target)`."""
    tree, watch, root = await build(make_tree, {
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "a": {"spawnedBy": "sa", "replies": [calls(spawn("sb")), HANG]},
        "b": {"spawnedBy": "sb", "replies": [calls(spawn("sc")), HANG]},
        "c": {"spawnedBy": "sc", "replies": [HANG]},
    })
    root.followup(user_message("go"))
    for key in ("a", "b", "c"):
        await reach(watch.hang(key))
    a, b, c = (watch.agents[k] for k in ("a", "b", "c"))
    activations = tree.manager.activations

    assert interrupt(tree.manager, b.id, UserAuthority(a.id)) is None

    assert b.cancels == [(USER, True)] and c.cancels == [] and a.cancels == []
    await reach(b.when_idle())
    assert turn_ends(b) == [aborted(USER)]
    assert activations[a.id].owned_children == {b.id}
    assert activations[b.id].owned_children == {c.id}
    assert c.status == "running" and a.status == "running"
    assert activations[b.id].disposal is None


# -- rule 7 ------------------------------------------------------------------------------------------


SECRET = "s3cr3t-7f2a detail that must stay local"


class BrittleAgent(RecordingAgent):
    """The real agent, except that a user cancel can be told to raise (an unexpected failure)."""

    brittle: BaseException | None = None

    def cancel(self, cause: dict[str, Any], *, keep_inbox: bool = False) -> None:
        if self.brittle is not None and cause == USER:
            raise self.brittle
        super().cancel(cause, keep_inbox=keep_inbox)


@pytest.fixture
def short_runtime_dir(monkeypatch: pytest.MonkeyPatch):
    """The suite's tmp home is too long for `home/run/<root>.sock`, so the socket falls back under
    XDG_RUNTIME_DIR (§18.1): point it at a private short directory, removed afterwards."""
    scratch = Path(tempfile.mkdtemp(prefix="dsh-", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(scratch))
    yield scratch
    shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(RuntimeError(SECRET), id="foreign-exception"),
        pytest.param(SubagentError("ACTIVATION_TEARDOWN_FAILED", SECRET), id="unmapped-subagent-error"),
    ],
)
async def test_rpc_interrupt_answers_an_unexpected_failure_as_internal_without_its_text(
    make_tree, short_runtime_dir, caplog, failure
):
    """Rule 7 (§18.3): `subagent.interrupt` whose interrupt fails unexpectedly (the child's cancel
    raises a foreign exception, or a SubagentError whose code has no RPC mapping) answers `internal`
    with the fixed message and empty details; the error's text never crosses the wire and is logged
    locally instead.
    Broken by: in methods.py, answering such a failure as `subagent-unauthorized` /
    `delivery_unavailable`, and, separately, putting `str(exc)` into the answer."""
    tree = await make_tree({
        "root": {"replies": [calls(spawn("sa")), text("STARTED")]},
        "child": {"spawnedBy": "sa", "replies": [HANG]},
    }, agent_class=BrittleAgent)
    watch = TreeWatch(tree)
    root = await tree.create_root()
    root.followup(user_message("go"))
    await reach(watch.hang("child"))
    child = watch.agents["child"]
    child.brittle = failure  # type: ignore[attr-defined]
    server = ControlServer(tree, root, state=lambda: "running")
    await server.start()
    reader, writer = await asyncio.open_unix_connection(str(server.path))
    try:
        request = {"jsonrpc": "2.0", "id": 7, "method": "subagent.interrupt",
                   "params": {"parentSessionId": root.id, "childSessionId": child.id}}
        with caplog.at_level(logging.ERROR, logger="dsh.loader.host.server"):
            writer.write(json.dumps(request).encode() + b"\n")
            await writer.drain()
            raw = await reach(reader.readline())
    finally:
        writer.close()
        await server.close()

    assert raw is not None
    response = json.loads(raw)
    assert response["id"] == 7 and "result" not in response
    assert response["error"] == {
        "code": -32603,
        "message": "the request failed inside dsh",
        "data": {"code": "internal", "details": {}},
    }
    assert SECRET.encode() not in raw and type(failure).__name__.encode() not in raw
    assert any(r.exc_info and SECRET in str(r.exc_info[1]) for r in caplog.records)
    assert child.status == "running" and child.cancels == []


# -- rule 8 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length", [SUMMARY_LIMIT - 1, SUMMARY_LIMIT, SUMMARY_LIMIT + 1], ids=lambda n: f"len{n}")
def test_a_summary_is_truncated_only_beyond_the_limit(length):
    """Rule 8 (§9.1): a summary line of up to `SUMMARY_LIMIT` (120) characters is kept whole, one of
    exactly 120 included; a longer one becomes its first 119 characters + `…`.
    Broken by: `<` instead of `<=` in notice.py's `_summary`."""
    base = len(render("T-NOTICE-completed", id=""))
    child_id = "c" * (length - base)
    line = render("T-NOTICE-completed", id=child_id)
    assert len(line) == length
    summary = settlement_message(child_id, "completed", None)["source"]["summary"]
    if length <= SUMMARY_LIMIT:
        assert summary == line
    else:
        assert summary == line[: SUMMARY_LIMIT - 1] + "…" and len(summary) == SUMMARY_LIMIT


async def test_fold_result_json_keeps_the_accounting_turn_end(make_runtime):
    """Rule 8 (§7.1): `FoldResult.to_json` omits `end` only when no turn accounts for work; over a
    real log whose turn stepped, it carries that `turn/end` event, and survives a JSON round trip.
    Broken by: dropping `out["end"] = self.end` in fold.py."""
    rt = await make_runtime([text("the answer")])
    agent = await rt.new_agent()
    agent.followup(user_message("go"))
    await reach(agent.when_idle())

    [end] = [e for e in agent.session.events if e["type"] == "turn/end"]
    as_json = fold_consumed_work(list(agent.session.events)).to_json()
    assert as_json == {"dropped_unrun": False, "end": end}
    assert json.loads(json.dumps(as_json)) == as_json
    accepted_only = [e for e in agent.session.events if e["type"] == "agent/inbox/spliced" and e["data"]["inserted"]]
    assert fold_consumed_work(accepted_only).to_json() == {"dropped_unrun": False}
