"""The user of a transcript (issue 12 "Not yet" item 4): what a person did from another terminal
during a recorded run, done again by the runner, so that a recording of such a run replays.

A replay has no user, and fences may not stand in for one: they never cancel a turn or send a
message (SPEC §16). So the transcript says what the user did (`transcripts/README.md`, "The
user"), and this module does it through the control methods the user's commands call (§18.2,
`host/methods.py`, without the socket), so a replayed interrupt or send takes the path a typed one
took, with the user's authority and source (`{"kind": "user"}`):

- `hang: {interrupt: user}` on a child's reply: once that hang is reached, `subagent.interrupt`
  with the child's durable parent address, as `dsh interrupt <root>/<child>` sends it. It runs in a
  fresh loop callback, as the control server's read callback runs, never inside the provider's
  stream that reports the hang.
- `user: [{send: {agent, text, when}}]`: once the fence condition `when` holds (§16.1), the
  `subagent.prompt` that `dsh send <root>/<agent> text` makes. The condition is read from the run's
  `Fences` (their facts), under the same backstop: waiting longer than
  `testing.fenceTimeoutSeconds` is `FENCE_TIMEOUT`; a send the run ended before is `USER_UNUSED`.

Invariant: each action is done at most once; `finish` cancels the sends still waiting.
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
    from dsh.loader.transcripts.schema import TranscriptSpec, UserSendSpec
    from dsh.loader.tree import Tree

__all__ = ["ScriptedUser"]

logger = logging.getLogger(__name__)


class ScriptedUser:
    def __init__(self, spec: TranscriptSpec, *, tree: Tree, root: Agent, replay: ReplayProvider,
                 fences: Fences, signal: AbortSignal) -> None:
        self.spec = spec
        self.tree = tree
        self.replay = replay
        self.fences = fences
        self.signal = signal
        self.methods = Methods(tree=tree, root=root, state=lambda: "running", signal=signal)
        self.violations: list[dict[str, Any]] = []
        self.done = [False] * len(spec.user)  # made, failed or timed out: never reported unused
        self._tasks: list[asyncio.Task[None]] = []
        self._offs: list[Any] = []

    def install(self) -> None:
        self._offs.append(self.replay.add_hang_listener(self._on_hang))
        for i, action in enumerate(self.spec.user):
            if action.send is None:
                continue
            task = asyncio.get_running_loop().create_task(self._send(i, action.send), name=f"user-send:{i + 1}")
            task.add_done_callback(_log_failure)
            self._tasks.append(task)

    # -- interrupt -------------------------------------------------------------------------
    def _on_hang(self, key: str) -> None:
        reply = self.replay.served_reply(key)
        if reply is None or reply.hang is None or reply.hang.interrupt != "user":
            return
        child = self.replay.session_of(key)
        if child is None:
            return
        # A fresh callback, as a typed `dsh interrupt` arrives: the provider reports the hang from
        # inside its stream, which the interrupt's cancel must not re-enter.
        asyncio.get_running_loop().call_soon(self._interrupt, key, child)

    def _interrupt(self, key: str, child: str) -> None:
        parent = self._parent_of(child)
        if parent is None:
            return
        try:
            self.methods.start("subagent.interrupt", {"parentSessionId": parent, "childSessionId": child})
        except (RpcError, DshError) as exc:
            self._violate("USER_ACTION_FAILED", key, f"the user's interrupt of {key} failed: {exc}")
            return
        logger.debug("scripted user: interrupted %s (%s)", key, child)

    # -- send ------------------------------------------------------------------------------
    async def _send(self, index: int, send: UserSendSpec) -> None:
        outcome = await self.fences.wait_until(send.when, self.signal)
        if outcome in ("met", "timeout"):
            self.done[index] = True
        if outcome == "timeout":
            self._violate("FENCE_TIMEOUT", send.agent, f"user send {index + 1} to {send.agent} waited "
                                                       f"{self.fences.timeout}s for its condition")
            return
        if outcome != "met":
            return  # the run is ending: `finish` reports the send as unused
        child = self.replay.session_of(send.agent)
        parent = self._parent_of(child) if child is not None else None
        if child is None or parent is None:
            self._violate("USER_ACTION_FAILED", send.agent, f"user send {index + 1}: {send.agent} has no session")
            return
        try:
            answer = self.methods.start("subagent.prompt", {
                "parentSessionId": parent, "childSessionId": child, "message": send.text})
            if asyncio.iscoroutine(answer):
                await answer
        except (RpcError, DshError) as exc:
            self._violate("USER_ACTION_FAILED", send.agent, f"user send {index + 1} to {send.agent} failed: {exc}")

    def _parent_of(self, child: str) -> str | None:
        """The child's durable parent address (its header), as `dsh` routes `<root>/<child>`."""
        agent = self.tree.registry.get(child)
        header = agent.header if agent is not None else self.tree.store.read(child).header
        parent = header.get("parentSession")
        return parent if isinstance(parent, str) else None

    # -- end of run ------------------------------------------------------------------------
    def finish(self) -> list[dict[str, Any]]:
        for off in self._offs:
            off()
        for task in self._tasks:
            task.cancel()
        for i, action in enumerate(self.spec.user):
            if action.send is not None and not self.done[i]:
                self._violate("USER_UNUSED", action.send.agent,
                              f"user send {i + 1} to {action.send.agent} was never made (the run ended first)")
        return self.violations

    def _violate(self, code: str, agent: str, message: str) -> None:
        logger.info("scripted user violation %s: %s", code, message)
        self.violations.append({"code": code, "agent": agent, "message": message})


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("scripted user task %s failed: %r", task.get_name(), task.exception())
