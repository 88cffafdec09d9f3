"""A transcript's user on the Temporal engine (issue 12 "Not yet" item 4): `loader/scripted_user.py`
done from the client, through the same calls `dsh interrupt` and `dsh send` make there (`user_call`).

The conditions (`when`, fence conditions, §16.1) are read from the root's fence board: the turns
publish the facts of every agent a fence or a user action names (`Fences.named`, `RunSpec.fences`
on for a transcript with a user list), and this runner mirrors the board as a turn does
(`long_polls.board_after`, source `user`) into a `Fences` of its own that holds nothing and only answers
`wait_until`. Once a condition holds, the action's agent is found from the logs the client reads
(the feed: the replay bindings rebuilt in creation order, `logs.replay_over`), its parent
from its header, and the call made with the user's authority. Violations as on the local engine:
FENCE_TIMEOUT past `testing.fenceTimeoutSeconds`, USER_ACTION_FAILED for a refused call, USER_UNUSED
for an action the run ended before.

Invariant: each action is done at most once; `finish` (`UserRunner`) cancels what still waits.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from temporalio.client import Client

from dsh.loader.engines.control import user_call
from dsh.loader.engines.logs import replay_over
from dsh.loader.engines.long_polls import TreeClosed, board_after
from dsh.loader.errors import DshError
from dsh.loader.fences import Fences
from dsh.loader.host.protocol import RpcError
from dsh.loader.models import ReplayProvider
from dsh.loader.scripted_user import UserRunner
from dsh.loader.session import ReadResult
from dsh.loader.transcripts import Transcript
from dsh.loader.transcripts.schema import UserAction

__all__ = ["RemoteUser"]

logger = logging.getLogger(__name__)


class RemoteUser(UserRunner):
    def __init__(self, script: Transcript, client: Client, root_id: str, logs: Callable[[], dict[str, ReadResult]],
                 timeout: float) -> None:
        super().__init__(list(script.spec.user))
        self.script = script
        self.client = client
        self.root_id = root_id
        self.logs = logs
        self.fences = Fences([], tree=None, replay=ReplayProvider(script), timeout=timeout)
        self._passes: list[asyncio.Future[None]] = []  # waiting for the feed's next pass (`stepped`)

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._mirror(), name="user-board"))
        for i, action in enumerate(self.actions):
            self._tasks.append(loop.create_task(self._act(i, action), name=f"user-action:{i + 1}"))

    def stepped(self) -> None:
        """The client's feed read a pass of the logs: what waits for one looks again."""
        passes, self._passes = self._passes, []
        for waiter in passes:
            if not waiter.done():
                waiter.set_result(None)

    async def _next_pass(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._passes.append(waiter)
        await waiter

    async def _mirror(self) -> None:
        handle = self.client.get_workflow_handle(self.root_id)
        seen = 0
        while True:
            try:
                facts = await board_after(handle, seen, "user")
            except TreeClosed:  # nothing more to learn
                logger.debug("the user's board mirror ends: the tree %s closed", self.root_id)
                return
            seen += len(facts)
            self.fences.merge(tuple(f) for f in facts)

    async def _act(self, index: int, action: UserAction) -> None:
        kind = "interrupt" if action.interrupt is not None else "send"
        part = action.interrupt or action.send
        assert part is not None  # the schema: exactly one form
        what = f"user {kind} {index + 1} ({part.agent})"
        outcome = await self.fences.wait_until(part.when, None)
        self.done[index] = True
        if outcome == "timeout":
            self._violate("FENCE_TIMEOUT", part.agent, f"{what} waited {self.fences.timeout}s for its condition")
            return
        child, parent = await self._address(part.agent)
        params = {"parentSessionId": parent, "childSessionId": child}
        try:
            if action.send is not None:
                answer = await user_call(self.client, self.root_id, "subagent.prompt",
                                         {**params, "message": action.send.text})
            else:
                answer = await user_call(self.client, self.root_id, "subagent.interrupt", params)
        except (RpcError, DshError) as exc:
            self._violate("USER_ACTION_FAILED", part.agent, f"{what} failed: {exc}")
            return
        if answer is None:
            self._violate("USER_ACTION_FAILED", part.agent, f"{what} failed: no live run hosts the tree")
            return
        logger.debug("remote user: %s done", what)

    async def _address(self, key: str) -> tuple[str, str]:
        """The agent's session and its durable parent, once the logs the client reads show it."""
        while (found := self._bound(key)) is None:
            await self._next_pass()
        return found

    def _bound(self, key: str) -> tuple[str, str] | None:
        logs = self.logs()
        child = replay_over(self.script, logs, self.root_id).session_of(key)
        if child is None or child not in logs:
            return None
        parent = logs[child].header.get("parentSession")
        return (child, parent) if isinstance(parent, str) else None
