"""The user of a transcript (issue 12 "Not yet" item 4): what a person did from another terminal
during a recorded run, done again by the runner, so that a recording of such a run replays.

A replay has no user, and fences may not stand in for one: they never cancel a turn or send a
message (SPEC §16). So the transcript says what the user did (`transcripts/README.md`, "The
user"), and this module does it through the control methods the user's commands call (§18.2,
`host/methods.py`, without the socket), so a replayed interrupt or send takes the path a typed one
took, with the user's authority and source (`{"kind": "user"}`):

- `user: [{interrupt: {agent, when}}]`: once the fence condition `when` holds (§16.1), the
  `subagent.interrupt` that `dsh interrupt <root>/<agent>` makes, with the child's durable parent
  address (its header);
- `user: [{send: {agent, text, when}}]`: once `when` holds, the `subagent.prompt` that `dsh send
  <root>/<agent> text` makes.

Each action is a task awaiting its condition on the run's `Fences` (their facts), under the same
backstop as a hold: waiting longer than `testing.fenceTimeoutSeconds` is `FENCE_TIMEOUT`; an action
the run ended before is `USER_UNUSED`. The method runs from that task after the condition's future
resolved, as a typed command runs from the control server's read callback: never inside the
listener that recorded the fact (a hang is reported from inside the provider's stream).

Invariant: each action is done at most once; `finish` cancels the actions still waiting.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from dsh.loader.errors import DshError
from dsh.loader.host.methods import Methods
from dsh.loader.host.protocol import RpcError

if TYPE_CHECKING:
    from dsh.loader.abort import AbortSignal
    from dsh.loader.agent import Agent
    from dsh.loader.fences import Fences
    from dsh.loader.models import ReplayProvider
    from dsh.loader.transcripts.schema import TranscriptSpec, UserAction
    from dsh.loader.tree import Tree

__all__ = ["ScriptedUser", "UserRunner"]

logger = logging.getLogger(__name__)


class UserRunner:
    """What both engines' runners of a transcript's user share (this one, and the Temporal client's,
    engines/remote_user.py): the violations, which actions were made, the end of the run."""

    def __init__(self, actions: list[UserAction]) -> None:
        self.actions = actions
        self.violations: list[dict[str, Any]] = []
        self.done = [False] * len(actions)  # made, failed or timed out: never reported unused
        self._tasks: list[asyncio.Task[None]] = []

    def stop(self) -> None:
        """Cancel the actions still waiting (the run has ended)."""
        for task in self._tasks:
            task.cancel()

    def finish(self) -> list[dict[str, Any]]:
        self.stop()
        for i, action in enumerate(self.actions):
            part = action.interrupt or action.send
            if part is not None and not self.done[i]:
                self._violate("USER_UNUSED", part.agent,
                              f"user action {i + 1} ({part.agent}) was never made (the run ended first)")
        return self.violations

    def _violate(self, code: str, agent: str, message: str) -> None:
        logger.info("scripted user violation %s: %s", code, message)
        self.violations.append({"code": code, "agent": agent, "message": message})


class ScriptedUser(UserRunner):
    def __init__(self, spec: TranscriptSpec, *, tree: Tree, root: Agent, replay: ReplayProvider,
                 fences: Fences, signal: AbortSignal) -> None:
        super().__init__(list(spec.user))
        self.spec = spec
        self.tree = tree
        self.replay = replay
        self.fences = fences
        self.signal = signal
        self.methods = Methods(tree=tree, root=root, state=lambda: "running", signal=signal)

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        for i, action in enumerate(self.actions):
            task = loop.create_task(self._act(i, action), name=f"user-action:{i + 1}")
            task.add_done_callback(_log_failure)
            self._tasks.append(task)

    async def _act(self, index: int, action: UserAction) -> None:
        kind = "interrupt" if action.interrupt is not None else "send"
        part = action.interrupt or action.send
        assert part is not None  # the schema: exactly one form
        what = f"user {kind} {index + 1} ({part.agent})"
        outcome = await self.fences.wait_until(part.when, self.signal)
        if outcome in ("met", "timeout"):
            self.done[index] = True
        if outcome == "timeout":
            self._violate("FENCE_TIMEOUT", part.agent, f"{what} waited {self.fences.timeout}s for its condition")
            return
        if outcome != "met":
            return  # the run is ending: `finish` reports the action as unused
        child = self.replay.session_of(part.agent)
        try:
            parent = self._parent_of(child) if child is not None else None
            if child is None or parent is None:
                self._violate("USER_ACTION_FAILED", part.agent, f"{what}: the agent has no session")
                return
            params = {"parentSessionId": parent, "childSessionId": child}
            if action.send is not None:
                answer = self.methods.start("subagent.prompt", {**params, "message": action.send.text})
                if asyncio.iscoroutine(answer):
                    await answer
            else:
                self.methods.start("subagent.interrupt", params)
        except (RpcError, DshError) as exc:
            self._violate("USER_ACTION_FAILED", part.agent, f"{what} failed: {exc}")
            return
        logger.debug("scripted user: %s done", what)

    def _parent_of(self, child: str) -> str | None:
        """The child's durable parent address (its header), as `dsh` routes `<root>/<child>`."""
        agent = self.tree.registry.get(child)
        header = agent.header if agent is not None else self.tree.store.read(child).header
        parent = header.get("parentSession")
        return parent if isinstance(parent, str) else None


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("scripted user task %s failed: %r", task.get_name(), task.exception())
