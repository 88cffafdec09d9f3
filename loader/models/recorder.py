"""Record mode (SPEC §13.3, §15.5): wrap the real provider and write what it said as a transcript.

The recorder passes every chunk through unchanged, so the run it records is the run the user
sees; beside that it keeps one reply entry per request, keyed by session id, in request order. A
transcript written from those entries replays to the same flow (§23 item 90): `write(logs=...)`
adds the observed settlement order as generated `hold` fences (`schedule.py`, issue 10; this
supersedes §15.5's "no fences are written").

How a request becomes a reply (§15.1 forms):
- a stream that ends with `Finish` → a message: `reasoning`, `text`, `toolCalls` (arguments as a
  mapping when they are a JSON object, else the raw string), `usage`, `finish` (always written, so
  the replay never has to guess it);
- a `ProviderError` → `error: {code, message, status?}` with the streamed text as `text`;
- an abort, a cancellation or a consumer that closed the stream before `Finish` → `hang` with the
  streamed text (omitted when empty); a request still open when the transcript is built is a hang
  too (a run that ended mid-stream).

Decisions where the spec leaves room:
- A stream that ends without `Finish` is recorded as `error: INCOMPLETE_STREAM` (what the assembler
  then raises), so the replay fails the same way; any other exception → `error: UNKNOWN`.
- Tool calls are built by the same `Assembler` the agent uses, so minted ids (`call-<n>`) and
  empty arguments (`{}`) are recorded as the agent logged them. `usage.cacheReadTokens` is dropped:
  the transcript schema has no such key.
- Children are `child-<n>` in `note_child` order; a child whose descriptor has a `spawnCallId`
  gets `spawnedBy`, any other `order: k` (k counting those children), mirroring replay binding.
  Requests of a session noted as neither root nor child are left out (and logged).
- `name` defaults to the file stem, made to fit `[a-z0-9-]+` (the transcript schema).
- A recorded session id in a reply's content (a `send_message` or `interrupt_agent` argument, a
  text naming a child) becomes the placeholder of that agent (§15.2): `{{child:<spawnCallId>}}`,
  else `{{session:<agent key>}}`. The replay mints other ids; before, its calls named sessions
  that did not exist (an interrupt of one is an accepted no-op, so the child's hang never ended).
- With the logs, the fences also hold each ancestor's interrupt until its target reached the hang
  the interrupt ended, and fail each checkpoint that failed (`stop_fences.py`). What the user did
  from another terminal is written as the transcript's `user` list, which the replay's runner does
  again (`loader/scripted_user.py`): each `dsh interrupt` that ended a hang as `{interrupt: {agent,
  when}}` (`stop_fences.observed_user_interrupts`), each `dsh send` as `{send: {agent, text,
  when}}` at its observed window (`schedule.observed_user_sends`).
- Redaction (issue 15 finding 10) touches only the fields that can carry a secret (the task, reply
  text, reasoning, tool-call argument values, error messages, hang text), never the structure
  (ids, tool names, agent keys, `finish`, fences), so the file always loads back and replays. A
  whole value equal to a secret is redacted; inside longer text only secrets of at least
  `MIN_EMBEDDED_SECRET` characters are, longest first (a throwaway key `e` would otherwise rewrite
  every word). Request headers are never recorded, so the key sent there never reaches the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.errors import ProviderError, error_chain
from dsh.loader.models.assembler import Assembler
from dsh.loader.models.protocol import Chunk, Finish, ModelProvider, ModelRequest, OnRetry, TextDelta

__all__ = ["REDACTED", "Recorder", "secrets_from_env"]

logger = logging.getLogger(__name__)

REDACTED = "[redacted]"
_SECRET_SUFFIXES = ("_KEY", "_TOKEN", "_SECRET")


def secrets_from_env(environ: Mapping[str, str]) -> list[str]:
    """Values of every variable named `*_KEY`, `*_TOKEN` or `*_SECRET` (§15.5), in name order."""
    found: list[str] = []
    for name in sorted(environ):
        value = environ[name]
        if name.upper().endswith(_SECRET_SUFFIXES) and value.strip() and value not in found:
            found.append(value)
    return found


@dataclass
class _Entry:
    """One request's reply, filled while its stream runs."""

    assembler: Assembler = field(default_factory=Assembler)
    text: list[str] = field(default_factory=list)
    finished: bool = False
    outcome: Literal["open", "message", "error", "hang"] = "open"
    error: dict[str, Any] | None = None

    def feed(self, chunk: Chunk) -> None:
        self.assembler.feed(chunk)
        if isinstance(chunk, TextDelta):
            self.text.append(chunk.text)
        elif isinstance(chunk, Finish):
            self.finished = True

    def fail(self, code: str, message: str, status: int | None = None) -> None:
        self.outcome = "error"
        self.error = {"code": code, "message": message}
        if status is not None:
            self.error["status"] = status

    def reply(self) -> dict[str, Any]:
        text = "".join(self.text)
        if self.outcome == "error":
            assert self.error is not None
            return {**({"text": text} if text else {}), "error": dict(self.error)}
        if self.outcome in ("open", "hang"):
            return {"hang": {"text": text} if text else {}}
        result = self.assembler.result()
        reply: dict[str, Any] = {}
        for block in result.content:
            if block["type"] == "reasoning":
                reply["reasoning"] = block["text"]
            elif block["type"] == "text":
                reply["text"] = block["text"]
            else:
                call = {"id": block["id"], "name": block["name"],
                        "arguments": _arguments(block["arguments"])}
                reply.setdefault("toolCalls", []).append(call)
        if result.usage is not None:
            reply["usage"] = {"inputTokens": result.usage["inputTokens"],
                              "outputTokens": result.usage["outputTokens"]}
        reply["finish"] = result.finish
        return reply


class Recorder:
    """A `ModelProvider` that forwards to `inner` and remembers every reply for `transcript()`."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.name: str = inner.name
        self._root: str | None = None
        self._children: list[tuple[str, dict[str, Any]]] = []
        self._replies: dict[str, list[_Entry]] = {}

    def __repr__(self) -> str:
        return f"Recorder({self.inner!r})"

    def note_root(self, session_id: str) -> None:
        self._root = session_id

    def note_child(self, session_id: str, descriptor: Mapping[str, Any]) -> None:
        """Learn a child at creation (its descriptor); a session noted before is ignored (resume)."""
        if session_id == self._root or any(sid == session_id for sid, _ in self._children):
            return
        self._children.append((session_id, dict(descriptor)))

    async def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncGenerator[Chunk, None]:
        entry = _Entry()
        self._replies.setdefault(request.session_id, []).append(entry)
        inner = self.inner.stream(request, signal, on_retry)
        try:
            async for chunk in inner:
                entry.feed(chunk)
                yield chunk
        except ProviderError as exc:
            entry.fail(exc.code, exc.message, exc.status)
            raise
        except (Aborted, asyncio.CancelledError, GeneratorExit):
            entry.outcome = "message" if entry.finished else "hang"
            raise
        except BaseException as exc:
            if signal.aborted:
                entry.outcome = "hang"
            else:
                entry.fail("UNKNOWN", error_chain(exc))
            raise
        else:
            if entry.finished:
                entry.outcome = "message"
            else:
                entry.fail("INCOMPLETE_STREAM", "the model stream ended without a finish reason")
        finally:
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        await self.inner.aclose()

    # ---- the transcript --------------------------------------------------------------------------

    def agent_keys(self) -> dict[str, str]:
        """Session id -> the transcript agent key `transcript()` gives it."""
        keys = {self._root: "root"} if self._root is not None else {}
        keys.update({sid: f"child-{n}" for n, (sid, _) in enumerate(self._children, start=1)})
        return keys

    def transcript(
        self, name: str, task: str, overlays: Iterable[str] | None = None,
        logs: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> dict[str, Any]:
        """The §15.1 document of everything recorded so far. With the run's `logs` (session id ->
        events) it also holds the observed settlement order as fences (`schedule.py`, issue 10)."""
        doc: dict[str, Any] = {"version": 1, "name": name, "task": task}
        listed = list(overlays or [])
        if listed:
            doc["overlays"] = listed
        if logs is not None:
            from dsh.loader.models.schedule import observed_fences
            from dsh.loader.models.stop_fences import stop_fences

            keys = self.agent_keys()
            fences = observed_fences(logs, keys) + stop_fences(logs, keys)
            if fences:
                doc["fences"] = fences
        if self._root is None:
            logger.warning("recorder: no root session was noted; root has no replies")
        agents: dict[str, Any] = {"root": {"replies": self._replies_of(self._root)}}
        unkeyed = 0
        for n, (session_id, descriptor) in enumerate(self._children, start=1):
            script: dict[str, Any] = {}
            call_id = descriptor.get("spawnCallId")
            if isinstance(call_id, str) and call_id:
                script["spawnedBy"] = call_id
            else:
                unkeyed += 1
                script["order"] = unkeyed
            script["replies"] = self._replies_of(session_id)
            agents[f"child-{n}"] = script
        known = {self._root, *(sid for sid, _ in self._children)}
        for session_id in self._replies:
            if session_id not in known:
                logger.warning("recorder: session %s was never noted; its replies are left out",
                               session_id)
        if logs is not None:
            from dsh.loader.models.schedule import observed_user_sends
            from dsh.loader.models.stop_fences import observed_user_interrupts

            keys = self.agent_keys()
            user = observed_user_interrupts(logs, keys) + observed_user_sends(logs, keys)
            if user:
                doc["user"] = user
        ids = self._placeholders()
        doc["agents"] = {key: {**script, "replies": [_ids_as_placeholders(r, ids) for r in script["replies"]]}
                         for key, script in agents.items()}
        return doc

    def _placeholders(self) -> dict[str, str]:
        """Session id -> the placeholder naming it in the transcript: `{{child:<spawnCallId>}}` for
        a child bound by its call, else `{{session:<agent key>}}` (§15.2)."""
        ids = {self._root: "{{session:root}}"} if self._root is not None else {}
        for n, (session_id, descriptor) in enumerate(self._children, start=1):
            call_id = descriptor.get("spawnCallId")
            ids[session_id] = (f"{{{{child:{call_id}}}}}" if isinstance(call_id, str) and call_id
                               else f"{{{{session:child-{n}}}}}")
        return ids

    def _replies_of(self, session_id: str | None) -> list[dict[str, Any]]:
        if session_id is None:
            return []
        return [entry.reply() for entry in self._replies.get(session_id, [])]

    def write(
        self,
        path: str | os.PathLike[str],
        *,
        task: str,
        overlays: Iterable[str] | None = None,
        redact: Iterable[str] = (),
        name: str | None = None,
        logs: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> Path:
        """Write the transcript atomically (temp file + rename, mode 0600) as YAML, redacted."""
        target = Path(path)
        doc = self.transcript(name if name is not None else _name_of(target), task, overlays, logs)
        secrets = sorted({s for s in redact if s}, key=len, reverse=True)
        doc = _redact(doc, secrets)
        yaml = YAML()
        yaml.default_flow_style = False
        yaml.indent(mapping=2, sequence=4, offset=2)  # the layout of the shipped transcripts
        yaml.width = 4096
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            os.fchmod(fd, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                yaml.dump(_literal_blocks(doc), fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return target


def _arguments(raw: str) -> dict[str, Any] | str:
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return value if isinstance(value, dict) else raw


# A secret shorter than this is redacted only where it is a whole value: a one-letter throwaway key
# (`e`, `x`) occurs inside every word, and replacing it there would corrupt the text (finding 10).
MIN_EMBEDDED_SECRET = 8


def _redact(doc: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    """Redact the fields that can carry a secret: the task and, per reply, `reasoning`, `text`,
    tool-call `arguments`, `error.message` and `hang.text`. Structure (names, ids, agent keys,
    `finish`, `spawnedBy`, fences, overlays) is never touched, so the file always loads and replays."""
    out = dict(doc)
    if isinstance(out.get("task"), str):
        out["task"] = _redact_text(out["task"], secrets)
    if isinstance(out.get("user"), list):  # the user's sends: their text is content
        out["user"] = [{**a, "send": {**a["send"], "text": _redact_text(a["send"]["text"], secrets)}}
                       if isinstance(a.get("send"), dict) else a for a in out["user"]]
    agents = out.get("agents")
    if isinstance(agents, dict):
        out["agents"] = {key: {**script, "replies": [_redact_reply(r, secrets) for r in script["replies"]]}
                         for key, script in agents.items()}
    return out


def _redact_reply(reply: dict[str, Any], secrets: list[str]) -> dict[str, Any]:
    return _map_reply(reply, lambda text: _redact_text(text, secrets))


def _map_reply(reply: dict[str, Any], fn: Callable[[str], str]) -> dict[str, Any]:
    """`reply` with `fn` applied to every content string: `reasoning`, `text`, tool-call argument
    values (never a key), `error.message`, `hang.text`; never to structure (ids, names, `finish`)."""
    out = dict(reply)
    for name in ("reasoning", "text"):
        if isinstance(out.get(name), str):
            out[name] = fn(out[name])
    if isinstance(out.get("toolCalls"), list):
        out["toolCalls"] = [{**call, "arguments": _map_value(call["arguments"], fn)} for call in out["toolCalls"]]
    if isinstance(out.get("error"), dict) and isinstance(out["error"].get("message"), str):
        out["error"] = {**out["error"], "message": fn(out["error"]["message"])}
    if isinstance(out.get("hang"), dict) and isinstance(out["hang"].get("text"), str):
        out["hang"] = {"text": fn(out["hang"]["text"])}
    return out


def _map_value(value: Any, fn: Callable[[str], str]) -> Any:
    """Tool-call arguments: every string value (never a key) as content."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {k: _map_value(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_value(v, fn) for v in value]
    return value


def _ids_as_placeholders(reply: dict[str, Any], ids: Mapping[str, str]) -> dict[str, Any]:
    """Every recorded session id in `reply`'s content as the §15.2 placeholder that names the same
    agent in the replay (`ids`: session id -> placeholder), longest id first: a model addresses a
    child by the id its run minted, which the replay's run never mints again."""
    if not ids:
        return reply
    order = sorted(ids, key=len, reverse=True)

    def swap(text: str) -> str:
        for session_id in order:
            if session_id in text:
                text = text.replace(session_id, ids[session_id])
        return text

    return _map_reply(reply, swap)


def _redact_text(text: str, secrets: list[str]) -> str:
    """A whole value equal to a secret becomes `[redacted]`; inside longer text only secrets of at
    least `MIN_EMBEDDED_SECRET` characters are replaced (longest first)."""
    if text in secrets:
        return REDACTED
    for secret in secrets:
        if len(secret) >= MIN_EMBEDDED_SECRET:
            text = text.replace(secret, REDACTED)
    return text


def _literal_blocks(value: Any) -> Any:
    """Multi-line strings as `|` blocks, so recorded answers stay readable and editable.

    Only strings a block scalar reproduces exactly: no `\r` and no control characters (those stay
    quoted scalars with escapes)."""
    if isinstance(value, str):
        if "\n" in value and all(ch in "\n\t" or ch.isprintable() for ch in value):
            return LiteralScalarString(value)
        return value
    if isinstance(value, dict):
        return {k: _literal_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal_blocks(v) for v in value]
    return value


def _name_of(path: Path) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", path.stem.lower()).strip("-")
    return slug or "recording"

