"""A `hang` reply without a prefix, reached, noted in the log (`engine/hang-reached {turn, step}`).

Whoever resumes a tree rebuilds the replay cursors from the logs (`ReplayProvider.resume_session`,
`replies_served`): each Temporal turn activity does it for its agent, and `dsh run --resume` for
the whole tree. A hang with a prefix leaves its answer there once aborted (the interrupted
`assistant/message`); one without leaves nothing, so the next turn was served the same hang again
(the tree hung where the uninterrupted run, whose cursors live in memory, went on) and the run
counted it unconsumed. The note, appended the moment the hang is reached (the prefix-less reply was
served), makes the aborted step count as served. Ignorable (§5.1): the flow projection skips it,
the `--json` stream carries it as it carries the rest of the log, and a crash mid-hang (its turn
closed `interrupted`, not `aborted`) still serves the hang again, as before. Both engines write it
(every `Tree` with a replay provider installs it), so their logs and streams agree, `seq` included.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dsh.loader.models.replay import HANG_REACHED_EVENT, ReplayProvider

if TYPE_CHECKING:
    from dsh.loader.agent import Agent

__all__ = ["HANG_REACHED_EVENT", "note_hangs"]


def note_hangs(replay: ReplayProvider, agent_of: Callable[[str], Agent | None]) -> None:
    """Note each prefix-less hang a resident agent's script reaches; `agent_of` maps a session id
    to its agent here (a tree's registry), or None for one this process does not run."""

    def reached(key: str) -> None:
        sid = replay.session_of(key)
        agent = agent_of(sid) if sid is not None else None
        if agent is None:
            return
        reply = replay.served_reply(key)
        if reply is None or reply.hang is None or reply.hang.text:
            return  # a prefix: the aborted step's interrupted answer is in the log
        step = next((e["data"] for e in reversed(agent.session.events) if e["type"] == "step/start"), None)
        if step is not None:
            agent.session.append(HANG_REACHED_EVENT, {"turn": step["turn"], "step": step["step"]}, ignorable=True)

    replay.add_hang_listener(reached)
