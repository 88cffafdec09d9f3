"""A `hang` reply without a prefix, reached, noted in the log (`engine/hang-reached {turn, step}`).

Each turn activity rebuilds the replay cursors from the log (`ReplayProvider.resume_session`,
`replies_served`). A hang with a prefix leaves its answer there once aborted (the interrupted
`assistant/message`); one without leaves nothing, so the next turn was served the same hang again
(the tree hung where the local engine, whose cursors live in memory, went on) and the client
counted it unconsumed. The note, appended the moment the hang is reached (the prefix-less reply
was served), makes the aborted step count as served. Ignorable (§5.1), like `engine/interrupt`:
the client's stream and the flow projection skip it, and a crash mid-hang (its turn closed
`interrupted`, not `aborted`) still serves the hang again, as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dsh.loader.models.replay import HANG_REACHED_EVENT, ReplayProvider

if TYPE_CHECKING:
    from dsh.loader.agent import Agent

__all__ = ["HANG_REACHED_EVENT", "note_hangs"]


def note_hangs(replay: ReplayProvider, agent: Agent) -> None:
    """Note each prefix-less hang `agent`'s script reaches (the turn activity runs one agent)."""

    def reached(key: str) -> None:
        if key != replay.agent_key_of(agent.id):
            return
        reply = replay.served_reply(key)
        if reply is None or reply.hang is None or reply.hang.text:
            return  # a prefix: the aborted step's interrupted answer is in the log
        step = next((e["data"] for e in reversed(agent.session.events) if e["type"] == "step/start"), None)
        if step is not None:
            agent.session.append(HANG_REACHED_EVENT, {"turn": step["turn"], "step": step["step"]}, ignorable=True)

    replay.add_hang_listener(reached)
