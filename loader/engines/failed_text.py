"""A failed model request's streamed text, kept in the log for `--record` (issue 12 "Not yet" item 4).

The local `Recorder` sees every chunk, so a request that streams some text and then fails is
recorded as `error: {…}` with that `text` (SPEC §15.1: the replay streams the prefix, then raises).
On Temporal the recording is rebuilt from the logs (recording.py), and the agent logs no partial
answer for a failed request: the turn ends `error` and the text is gone. So the turn activity
wraps each agent's provider in `KeepFailedText`, which notes that text as `engine/failed-text
{turn, step, text}` (ignorable, §5.1 extension, like `engine/interrupt`: other readers skip it,
and the client's stream does, so the NDJSON is the local engine's) before the failure reaches
the loop; the recording reads it as the `text` of the open request's `error`.

Invariants:
- one event per failed request with a non-empty text, written before the loop sees the failure, so
  it sits between that request's `llm/request` and the turn's `turn/end`;
- "failed" is what the Recorder calls an `error`: a `ProviderError`, any other exception while the
  request's signal is not aborted, or a stream that ended without `Finish` (the assembler then
  raises INCOMPLETE_STREAM); an abort or a cancellation writes nothing (the loop logs the partial
  answer as an `interrupted` message itself), nor does a stream that finished.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.models import Chunk, Finish, ModelProvider, ModelRequest, OnRetry, TextDelta

if TYPE_CHECKING:
    from dsh.loader.session import Session

__all__ = ["FAILED_TEXT_EVENT", "KeepFailedText"]

FAILED_TEXT_EVENT = "engine/failed-text"


class KeepFailedText:
    """`inner`, noting the streamed text of each request that fails in `session`'s log."""

    def __init__(self, inner: ModelProvider, session: Session) -> None:
        self.inner = inner
        self.name = inner.name
        self._session = session

    async def stream(self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry) -> AsyncGenerator[Chunk, None]:
        text: list[str] = []
        finished = False
        try:
            async for chunk in self.inner.stream(request, signal, on_retry):
                if isinstance(chunk, TextDelta):
                    text.append(chunk.text)
                elif isinstance(chunk, Finish):
                    finished = True
                yield chunk
        except (Aborted, asyncio.CancelledError, GeneratorExit):
            raise
        except BaseException:
            if not signal.aborted:
                self._note(request, text)
            raise
        if not finished:
            self._note(request, text)

    def _note(self, request: ModelRequest, text: list[str]) -> None:
        joined = "".join(text)
        if joined:
            self._session.append(FAILED_TEXT_EVENT, {"turn": request.turn, "step": request.step, "text": joined},
                                 ignorable=True)

    async def aclose(self) -> None:
        await self.inner.aclose()
