"""A transcript's user on the Temporal engine (issue 12 "Not yet" item 4): `loader/scripted_user.py`
done from the client, through the same calls `dsh interrupt` and `dsh send` make there (`user_call`).

The conditions (`when`, fence conditions, §16.1) are read from the root's fence board: the turns
publish the facts of every agent a fence or a user action names (`Fences.named`, `RunSpec.fences`
on for a transcript with a user list), and this runner mirrors the board as a turn does (update
`fence_facts_after`, source `user`) into a `Fences` of its own that holds nothing and only answers
`wait_until`. Once a condition holds, the action's agent is found from the logs the client reads
(the feed: the replay bindings rebuilt in creation order, as `client._unconsumed` does), its parent
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
from dsh.loader.engines.workflow import AgentWorkflow
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
        self._stepped = asyncio.Event()  # the feed read more of the logs (`stepped`)
        self.started_before: Callable[[str], None] | None = None  # the sinks' own `on_started` (client.py)

    def install(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._mirror(), name="user-board"))
        for i, action in enumerate(self.script.spec.user):
            self._tasks.append(loop.create_task(self._act(i, action), name=f"user-action:{i + 1}"))

    def stepped(self) -> None:
        """The client's feed read a pass of the logs: an action waiting for its agent looks again."""
        self._stepped.set()

    async def _mirror(self) -> None:
        handle = self.client.get_workflow_handle(self.root_id)
        seen = 0
        while True:
            try:
                facts = await handle.execute_update(AgentWorkflow.fence_facts_after, args=[seen, "user"])
            except Exception as exc:  # the tree closed: nothing more to learn
                logger.debug("the user's board mirror ends: %r", exc)
                return
            seen += len(facts)  # [] : the run handed over (the next update reaches the new one) or closes
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
        while True:
            self._stepped.clear()
            found = self._bound(key)
            if found is not None:
                return found
            await self._stepped.wait()

    def _bound(self, key: str) -> tuple[str, str] | None:
        logs = self.logs()
        replay = ReplayProvider(self.script)
        sessions = sorted(logs.items(), key=lambda kv: (int(kv[1].header.get("createdAt") or 0), kv[0]))
        for sid, log in sessions:
            descriptor = next((e["data"] for e in log.events if e["type"] == "subagent/descriptor"), None)
            if sid == self.root_id or descriptor is not None:
                replay.resume_session(sid, None if sid == self.root_id else descriptor, log.events)
        child = replay.session_of(key)
        if child is None or child not in logs:
            return None
        parent = logs[child].header.get("parentSession")
        return (child, parent) if isinstance(parent, str) else None
