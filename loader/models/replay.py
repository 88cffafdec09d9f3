"""The replay provider: serves transcript replies per bound session, never the network (SPEC §13.3).

Binding (§15.3). `bind_root` binds the runner's root session to `root`. `bind_child` is the hook
the continuation manager calls with a child's descriptor at creation: the child binds to the script
whose `spawnedBy` equals the descriptor's `spawnCallId`; otherwise to the script with `order == k`,
k counting (from 1) the children created so far that did not bind by `spawnedBy`, this one
included; otherwise it is unrecorded. Binding a session id seen before is a no-op, so a cold-resumed
child keeps its script and cursor.

Decisions where the spec leaves room:
- A child whose `spawnedBy` script is already bound records `REPLAY_BINDING_CONFLICT`, stays
  unrecorded and does not count towards k (it did match a `spawnedBy`; counting it would shift the
  order of its siblings).
- `{{child:<callId>}}` maps to the first session created with that `spawnCallId`, bound or not.
- Mapping arguments are served as compact JSON (`separators=(",", ":")`, `ensure_ascii=False`);
  string arguments are served verbatim.
- Empty `text`/`reasoning` strings and an empty error/hang prefix produce no delta.

Invariants:
- `_cursor[key]` counts requests served to `key` (§15.3 item 4: a request is counted when served,
  before its first chunk, not when it finishes); a request beyond the script leaves it unchanged.
- `hang_reached(key)` never un-happens (fence conditions are monotone, §16.1); it turns true only
  after the consumer resumed the generator past the hang's prefix, i.e. consumed it.
- Every violation is also the failure of the request that caused it (a `ProviderError` with the
  same code), except `REPLAY_BINDING_CONFLICT` (recorded at binding, its requests then fail as
  unrecorded) and the end-of-run `REPLAY_UNCONSUMED`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from typing import TYPE_CHECKING, Any

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.errors import ProviderCode, ProviderError
from dsh.loader.models.protocol import Chunk, ModelRequest, OnRetry
from dsh.loader.models.replay_build import DEFAULT_USAGE, Served, build, plain_chunks
from dsh.loader.transcripts import PlaceholderKind, Transcript, UnresolvedPlaceholder

if TYPE_CHECKING:
    from dsh.loader.transcripts import Reply

__all__ = ["DEFAULT_USAGE", "HANG_REACHED_EVENT", "ReplayProvider", "replies_served"]

# An ignorable note (§5.1) both engines write when a `hang` reply without a prefix is reached
# (loader/hang_note.py): its abort leaves no answer in the log, and a resume (each Temporal turn
# activity, `dsh run --resume`) rebuilds the cursors from the log, so without the note the next
# turn was served the same hang again.
HANG_REACHED_EVENT = "engine/hang-reached"

logger = logging.getLogger(__name__)

HangListener = Callable[[str], None]


class ReplayProvider:
    name: str = "replay"
    # Its reads hold no task-bound state (no anyio cancel scope, no task-local context), so the loop
    # may start each read on the driver's task and finish a suspended one on another (issue 13,
    # `stream_read._first_step`); most reads never suspend: the chunks are already there.
    reads_move_between_tasks: bool = True

    def __init__(self, transcript: Transcript) -> None:
        self.transcript = transcript
        self.violations: list[dict[str, str]] = []
        agents = transcript.spec.agents
        self._key_by_spawn_call = {s.spawned_by: k for k, s in agents.items() if s.spawned_by}
        self._key_by_order = {s.order: k for k, s in agents.items() if s.order is not None}
        self._key_by_session: dict[str, str] = {}
        self._session_by_key: dict[str, str] = {}
        self._cursor: dict[str, int] = {}
        self._child_by_call: dict[str, str] = {}
        self._children_seen: set[str] = set()
        self._unkeyed_children = 0  # k of §15.3 item 2
        self._hangs_reached: set[str] = set()
        self._hang_listeners: list[HangListener] = []
        self._unconsumed: list[dict[str, str]] = []
        self._resumed: set[str] = set()

    # ---- binding -------------------------------------------------------------------------------

    def bind_root(self, session_id: str) -> None:
        holder = self._session_by_key.get("root")
        if holder == session_id:
            return
        if holder is not None:
            self._record(
                "REPLAY_BINDING_CONFLICT",
                "root",
                f"root is already bound to session {holder}; {session_id} stays unrecorded",
            )
            return
        self._bind(session_id, "root")

    def bind_child(self, session_id: str, descriptor: dict[str, Any]) -> None:
        if session_id in self._children_seen:
            return  # cold resume (§15.3 item 3): same session id, same script, same cursor
        self._children_seen.add(session_id)
        call_id = descriptor.get("spawnCallId")
        if isinstance(call_id, str):
            self._child_by_call.setdefault(call_id, session_id)
            key = self._key_by_spawn_call.get(call_id)
            if key is not None:
                holder = self._session_by_key.get(key)
                if holder is not None:
                    self._record(
                        "REPLAY_BINDING_CONFLICT",
                        key,
                        f"session {session_id} was spawned by {call_id}, whose script {key} is "
                        f"already bound to session {holder}",
                    )
                    return
                self._bind(session_id, key)
                return
        self._unkeyed_children += 1
        key = self._key_by_order.get(self._unkeyed_children)
        if key is None:
            logger.info(
                "replay: child %s (child #%d without spawnedBy script) is unrecorded",
                session_id,
                self._unkeyed_children,
            )
            return
        self._bind(session_id, key)

    def resume_session(
        self, session_id: str, descriptor: dict[str, Any] | None, events: list[dict[str, Any]]
    ) -> None:
        """A session that already has a log (`dsh run --resume` in a new process): bind it as at its
        creation (the root with `descriptor=None`), then continue its script where the log leaves
        off, so a resumed tree is served the replies its crashed run had not yet consumed.

        Call it for the root and for every descendant in creation order before anything runs:
        `order` binding counts children in that order. Once per session and process; a session
        already served here keeps its live cursor.
        """
        if session_id in self._resumed:
            return
        self._resumed.add(session_id)
        if descriptor is None:
            self.bind_root(session_id)
        else:
            self.bind_child(session_id, descriptor)
        key = self._key_by_session.get(session_id)
        if key is None:
            return
        total = len(self.transcript.spec.agents[key].replies)
        self._cursor[key] = max(self._cursor[key], min(total, replies_served(events)))

    def _bind(self, session_id: str, key: str) -> None:
        self._key_by_session[session_id] = key
        self._session_by_key[key] = session_id
        self._cursor.setdefault(key, 0)
        logger.debug("replay: session %s bound to script %s", session_id, key)

    def agent_key_of(self, session_id: str) -> str | None:
        return self._key_by_session.get(session_id)

    def session_of(self, agent_key: str) -> str | None:
        return self._session_by_key.get(agent_key)

    # ---- serving -------------------------------------------------------------------------------

    async def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncGenerator[Chunk, None]:
        signal.throw_if_aborted()
        key, served = self._serve(request)
        for chunk in served.chunks:
            yield chunk
        if served.error is not None:
            raise served.error
        if served.form == "hang":
            # Reached only once the consumer resumed us past the prefix, i.e. consumed it (§16.1).
            self._reach_hang(key)
            # shield: cancelling this read (hard stop) must not cancel the signal's shared future,
            # which other tasks may be awaiting.
            await asyncio.shield(signal.wait())
            raise Aborted(signal.reason)

    def ready(self, request: ModelRequest, signal: AbortSignal) -> tuple[list[Chunk], ProviderError | None] | None:
        """The whole reply at once, `(chunks, error to raise after them)`, when serving it cannot
        suspend: a message or an error reply (issue 13: `stream`'s async generator cost the loop
        one read, a frame chain and an `aclose` per chunk). None for a hang, an unbound session or
        an exhausted script: then `stream` serves (or fails) the request as before. Counts the
        reply as served at the same point as `stream`'s first read (§15.3 item 4). The loop hands it
        the request with empty `messages` (a replay reads only the session, turn and step)."""
        key = self._key_by_session.get(request.session_id)
        if key is None:
            return None
        replies = self.transcript.spec.agents[key].replies
        cursor = self._cursor[key]
        if cursor >= len(replies) or replies[cursor].hang is not None:
            return None
        if signal.aborted:
            raise Aborted(signal.reason)
        chunks = plain_chunks(replies[cursor])
        if chunks is None:  # placeholders, tool calls, an error: `_serve` builds (or fails) it
            _, served = self._serve(request)
            return served.chunks, served.error
        self._cursor[key] = cursor + 1  # `_serve` without its second lookup (issue 13); §15.3 item 4
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("replay: serving reply #%d of %s (%s)", cursor + 1, key, "message")
        return chunks, None

    def _serve(self, request: ModelRequest) -> tuple[str, Served]:
        key = self._key_by_session.get(request.session_id)
        if key is None:
            raise self._fail(
                "REPLAY_UNRECORDED_SESSION",
                None,
                f"session {request.session_id} is bound to no transcript script "
                f"(turn {request.turn}, step {request.step})",
            )
        replies = self.transcript.spec.agents[key].replies
        cursor = self._cursor[key]
        if cursor >= len(replies):
            raise self._fail(
                "REPLAY_SCRIPT_EXHAUSTED",
                key,
                f"request #{cursor + 1} of agent {key} is beyond its script of {len(replies)} "
                f"replies (turn {request.turn}, step {request.step})",
            )
        self._cursor[key] = cursor + 1  # §15.3 item 4: counted when served
        try:
            served = build(replies[cursor], self._lookup)
        except UnresolvedPlaceholder as exc:
            raise self._fail(
                "REPLAY_PLACEHOLDER", key, f"reply #{cursor + 1} of agent {key}: {exc}"
            ) from exc
        logger.debug("replay: serving reply #%d of %s (%s)", cursor + 1, key, served.form)
        return key, served

    def _lookup(self, kind: PlaceholderKind, name: str) -> str | None:
        if kind == "child":
            return self._child_by_call.get(name)
        return self._session_by_key.get(name)

    # ---- hangs ---------------------------------------------------------------------------------

    def add_hang_listener(self, fn: HangListener) -> Callable[[], None]:
        """Call `fn(agent_key)` each time a hang is reached. Returns an unsubscribe."""
        self._hang_listeners.append(fn)

        def remove() -> None:
            if fn in self._hang_listeners:
                self._hang_listeners.remove(fn)

        return remove

    def served_reply(self, agent_key: str) -> Reply | None:
        """The reply last served to `agent_key` (a hang listener reads whether the user ends it)."""
        cursor = self._cursor.get(agent_key, 0)
        return self.transcript.spec.agents[agent_key].replies[cursor - 1] if cursor else None

    def hang_reached(self, agent_key: str) -> bool:
        return agent_key in self._hangs_reached

    def _reach_hang(self, key: str) -> None:
        self._hangs_reached.add(key)
        logger.debug("replay: %s reached a hang", key)
        for fn in list(self._hang_listeners):
            try:
                fn(key)
            except Exception:
                logger.exception("hang listener failed")

    # ---- strictness ----------------------------------------------------------------------------

    def finish_checks(self) -> list[dict[str, str]]:
        """Record `REPLAY_UNCONSUMED` for every script not fully served; returns those violations.

        Idempotent: a second call replaces the entries of the first instead of adding more.
        """
        self.violations[:] = [v for v in self.violations if not _contains(self._unconsumed, v)]
        self._unconsumed = []
        for key, script in self.transcript.spec.agents.items():
            total = len(script.replies)
            if key not in self._session_by_key:
                message = f"agent {key} was never bound to a session (0/{total} replies consumed)"
            elif self._cursor[key] < total:
                message = f"agent {key} consumed {self._cursor[key]}/{total} replies"
            else:
                continue
            self._unconsumed.append(self._record("REPLAY_UNCONSUMED", key, message))
        return list(self._unconsumed)

    def _record(self, code: str, agent: str | None, message: str) -> dict[str, str]:
        violation = {"code": code, "message": message}
        if agent is not None:
            violation["agent"] = agent
        self.violations.append(violation)
        # INFO, not WARNING: every violation is reported by whoever runs the transcript (the run
        # result, `dsh run`'s stderr, the pytest failure); a warning printed each one twice.
        logger.info("replay violation %s: %s", code, message)
        return violation

    def _fail(self, code: ProviderCode, agent: str | None, message: str) -> ProviderError:
        self._record(code, agent, message)
        return ProviderError(code, message)

    async def aclose(self) -> None:
        return None


def replies_served(events: list[dict[str, Any]]) -> int:
    """How many scripted replies a log shows as served (§15.3 item 4, read back after a crash).

    A step consumed one reply iff the log holds the model's answer to it: an `assistant/message`
    (complete or interrupted), or, for a step without one, a `turn/end` of kind `error` whose code is
    not CHECKPOINT_FAILED (a provider error: an `error` reply), or a `hang` without a prefix that
    was reached (`HANG_REACHED_EVENT`) and then aborted (`turn/end` of kind `aborted`). A request
    whose answer the crash swallowed left nothing in the log and is served again; so is a `hang`
    cut off by a crash (its turn is closed `interrupted`), prefix or not.
    """
    served = 0
    answered = stepped = hung = False
    for event in events:
        kind, data = event["type"], event["data"]
        if kind == "step/start":
            answered, stepped, hung = False, True, False
        elif kind == "assistant/message":
            served += 1
            answered = True
        elif kind == HANG_REACHED_EVENT:
            hung = stepped and not answered
        elif kind == "turn/start":
            answered = stepped = hung = False
        elif kind == "turn/end":
            reason = data.get("reason") or {}
            code = (reason.get("error") or {}).get("code")
            # Neither a checkpoint failure nor a failed Temporal run's settlement (engines/settle.py)
            # asked the model anything.
            if reason.get("kind") == "error" and stepped and not answered and code not in (
                    "CHECKPOINT_FAILED", "ENGINE_RUN_FAILED"):
                served += 1
            elif reason.get("kind") == "aborted" and hung and not answered:
                served += 1
    return served


def _contains(items: list[dict[str, str]], item: dict[str, str]) -> bool:
    return any(x is item for x in items)
