"""The OpenAI-compatible provider (SPEC §13.2): chat completions streamed over SSE with httpx.

This is the one place where httpx errors become `ProviderError` codes (STYLE §4), always with
`raise … from exc` and with messages that name a status and a code but never a header, a body or
the key. The key lives only in `_api_key` and in the `Authorization` header of each request; it is
kept out of `repr`, log records and error messages.

Why the stream is shaped the way it is:
- Retries happen only before the first SSE event: once the model has said something, repeating the
  request could produce a different answer the consumer has already half seen, so any later failure
  is terminal. Each retry calls `on_retry` *before* its sleep, so `llm/retry` is logged even when the
  sleep is then aborted.
- Every read (the request itself, each event, the backoff sleep) races `signal.wait()`; when the
  abort wins, the read is abandoned (`Task.cancel`), the response is closed and `Aborted` is raised
  without waiting for another byte (§4.1, §13.2). The shared abort future is only ever *awaited*
  through `asyncio.wait`, never cancelled.
- A read gap longer than `read_timeout` is a `TIMEOUT`. httpx enforces the same bound per socket
  read; the provider's own timer also covers streams that httpx does not time (mock transports).
- OpenAI streams may send the usage object in a chunk *after* the one with `finish_reason`, so
  `Finish` is emitted only when the stream ends (`[DONE]` or EOF): the assembler then has both. A
  stream that ends without a `finish_reason` emits no `Finish`, and the assembler reports
  `INCOMPLETE_STREAM`.

Decisions where the spec leaves room:
- Before the first event every `httpx.TransportError` is retried (timeouts as `TIMEOUT`, the rest,
  connect errors included, as `NETWORK`); so is a first-event read gap.
- HTTP 5xx other than 500/502/503/504 → `PROVIDER_UNAVAILABLE` without retry; 3xx →
  `PROVIDER_REJECTED`. A 2xx that is not an event stream, or an event that is not a JSON object →
  `BAD_RESPONSE`; an in-stream `{"error": …}` event → `PROVIDER_ERROR`.
- `Retry-After` may be seconds or an HTTP date; an unparsable value falls back to the jitter.
- The body's `model` is `request.model` (what the log records as `source.model`), else the
  provider's own `model`. Cache hits also read OpenAI's `prompt_tokens_details.cached_tokens`.
- Message mapping and event parsing are pure functions in `_openai_wire.py`; failure
  classification (status, transport error, read gap → code) lives in `_openai_failures.py`.
- Keyless endpoints (issue 16 item 4): `model.apiKeyEnv: null` means the server takes no key, as a
  local Ollama or vLLM; the request then carries no `Authorization` header at all (an empty
  `Bearer` is refused by some proxies) and no variable is read.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, TypeVar

import httpx
from httpx_sse import EventSource, ServerSentEvent, SSEError

from dsh.loader.abort import Aborted, AbortSignal
from dsh.loader.errors import ConfigError, ProviderError
from dsh.loader.models._openai_failures import (
    Failure,
    ReadGap,
    gap_failure,
    provider_message,
    status_failure,
    transport_failure,
)
from dsh.loader.models._openai_wire import finish_reason, parse_event, request_body
from dsh.loader.models.protocol import Chunk, Finish, ModelRequest, OnRetry, ToolCallDelta

__all__ = ["ModelSettings", "OpenAICompatibleProvider"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
Sleep = Callable[[float], Awaitable[object]]
Uniform = Callable[[float, float], float]



class _RetrySettings(Protocol):
    max_attempts: int
    initial_backoff_seconds: float
    max_backoff_seconds: float


class ModelSettings(Protocol):
    """The `model.*` settings `from_env` reads; `loader.config.ModelConfig` has this shape."""

    # Read-only members (properties), so frozen pydantic models and dataclasses both conform.
    @property
    def base_url(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def api_key_env(self) -> str | None: ...
    @property
    def connect_timeout_seconds(self) -> float: ...
    @property
    def read_timeout_seconds(self) -> float: ...
    @property
    def retry(self) -> _RetrySettings: ...


_Opened = tuple[httpx.Response, AsyncGenerator[ServerSentEvent, None], ServerSentEvent | None]
"""An answered request: the response, its event iterator and the first event (None at once-EOF)."""


class OpenAICompatibleProvider:
    name: str = "openai-compatible"

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None,
        connect_timeout: float = 10.0,
        read_timeout: float = 120.0,
        max_attempts: int = 4,
        initial_backoff: float = 1.0,
        max_backoff: float = 30.0,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        uniform: Uniform = random.uniform,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self._api_key = api_key
        self.read_timeout = read_timeout
        self.max_attempts = max(1, max_attempts)
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self._timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=self._timeout)
        self._sleep = sleep
        self._uniform = uniform

    @classmethod
    def from_env(
        cls,
        settings: ModelSettings,
        environ: Mapping[str, str],
        *,
        client: httpx.AsyncClient | None = None,
        sleep: Sleep = asyncio.sleep,
        uniform: Uniform = random.uniform,
    ) -> OpenAICompatibleProvider:
        """Build from `model.*` settings; the key comes from the variable named by `apiKeyEnv`, and
        `apiKeyEnv: null` (a keyless local server) reads no variable and sends no key."""
        variable = settings.api_key_env
        key = environ.get(variable, "").strip() if variable is not None else None  # no trailing newline
        if variable is not None and not key:
            raise ConfigError(
                f"the model API key is missing: set the environment variable {variable}",
                code="MISSING_API_KEY",
            )
        return cls(
            base_url=settings.base_url,
            model=settings.model,
            api_key=key,
            connect_timeout=settings.connect_timeout_seconds,
            read_timeout=settings.read_timeout_seconds,
            max_attempts=settings.retry.max_attempts,
            initial_backoff=settings.retry.initial_backoff_seconds,
            max_backoff=settings.retry.max_backoff_seconds,
            client=client,
            sleep=sleep,
            uniform=uniform,
        )

    def __repr__(self) -> str:
        return (f"OpenAICompatibleProvider(base_url={self.base_url!r}, model={self.model!r}, "
                "api_key=<hidden>)")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    # ---- streaming -----------------------------------------------------------------------------

    async def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncGenerator[Chunk, None]:
        signal.throw_if_aborted()
        response, events, event = await self._open(request_body(request, self.model), signal, on_retry)
        try:
            reason: str | None = None
            saw_tool_calls = False
            while event is not None:
                data = event.data.strip()
                if data == "[DONE]":
                    break
                if data:
                    chunks, raw = parse_event(data)
                    for chunk in chunks:
                        saw_tool_calls = saw_tool_calls or isinstance(chunk, ToolCallDelta)
                        yield chunk
                    if raw is not None:
                        reason = raw
                event = await self._read_after_first(events, response, signal)
            if reason is not None:
                yield Finish(finish_reason(reason, saw_tool_calls=saw_tool_calls))
        finally:
            await _close(events, response)

    async def _read_after_first(
        self, events: AsyncIterator[ServerSentEvent], response: httpx.Response, signal: AbortSignal
    ) -> ServerSentEvent | None:
        """After the first event every failure is terminal (§13.2)."""
        try:
            return await self._next_event(events, response, signal)
        except ReadGap as exc:
            raise gap_failure(self.read_timeout).error(1) from exc
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise transport_failure(exc, url=self.url).error(1) from exc

    async def _open(
        self, body: dict[str, Any], signal: AbortSignal, on_retry: OnRetry
    ) -> _Opened:
        """Send the request until its first SSE event arrives, retrying what §13.2 allows."""
        for attempt in range(1, self.max_attempts + 1):
            signal.throw_if_aborted()
            failure = await self._attempt(body, signal)
            if not isinstance(failure, Failure):
                return failure
            if not failure.retryable or attempt == self.max_attempts:
                raise failure.error(attempt) from failure.cause
            delay = self._delay(attempt, failure.retry_after)
            # `failure.what` names the status or the URL; never Python's `None` (issue 11 item 5).
            logger.warning("model request attempt %d failed: %s (%s); retrying in %.1f s",
                           attempt, failure.what, failure.code, delay)
            on_retry(attempt, round(delay * 1000), failure.code, failure.status)
            await self._sleep_or_abort(delay, signal)
        raise AssertionError("unreachable: the last attempt raises")  # pragma: no cover

    async def _attempt(
        self, body: dict[str, Any], signal: AbortSignal
    ) -> _Opened | Failure:
        try:
            response = await self._send(body, signal)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            return transport_failure(exc, retryable=True, url=self.url)
        if not response.is_success:
            # The error body races the abort like every read (§13.2): a slow body never holds a cancel.
            reading = asyncio.ensure_future(_error_body(response))
            if not await _first_of(reading, signal, self.read_timeout):
                await _abandon(reading)
                await response.aclose()
                signal.throw_if_aborted()
            answer = reading.result() if reading.done() and not reading.cancelled() else b""
            return status_failure(response, self.base_url, provider_message(answer, (self._api_key,)))
        events = EventSource(response).aiter_sse()
        try:
            first = await self._next_event(events, response, signal)
        except ReadGap as exc:
            failure = gap_failure(self.read_timeout, retryable=True)
            failure.cause = exc
        except SSEError as exc:
            failure = Failure("BAD_RESPONSE", "the model provider did not answer with an event stream",
                               status=response.status_code, cause=exc)
        except (httpx.HTTPError, httpx.StreamError) as exc:
            failure = transport_failure(exc, retryable=True, url=self.url)
        except BaseException:
            await _close(events, response)
            raise
        else:
            return response, events, first
        await _close(events, response)
        return failure

    async def _send(self, body: dict[str, Any], signal: AbortSignal) -> httpx.Response:
        request = self._client.build_request(
            "POST",
            self.url,
            json=body,
            headers=self._headers(),
            timeout=self._timeout,
        )
        sending = asyncio.ensure_future(self._client.send(request, stream=True))
        if await _first_of(sending, signal, None):
            return sending.result()
        late = await _abandon(sending)
        if isinstance(late, httpx.Response):
            await late.aclose()
        raise Aborted(signal.reason)

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    async def _next_event(
        self, events: AsyncIterator[ServerSentEvent], response: httpx.Response, signal: AbortSignal
    ) -> ServerSentEvent | None:
        reading = asyncio.ensure_future(anext(events, None))
        if await _first_of(reading, signal, self.read_timeout):
            return reading.result()
        await _abandon(reading)  # a read we no longer need; it must not outlive the response
        await response.aclose()
        if signal.aborted:
            raise Aborted(signal.reason)
        raise ReadGap()

    async def _sleep_or_abort(self, delay: float, signal: AbortSignal) -> None:
        sleeping = asyncio.ensure_future(self._sleep(delay))
        if await _first_of(sleeping, signal, None):
            sleeping.result()
            return
        await _abandon(sleeping)
        raise Aborted(signal.reason)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            delay = retry_after
        else:  # full jitter (§13.2)
            delay = self._uniform(0.0, min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1)))
        return max(0.0, min(delay, self.max_backoff))


# ---- racing ----------------------------------------------------------------------------------------


async def _first_of(task: asyncio.Future[Any], signal: AbortSignal, timeout: float | None) -> bool:
    """Wait for `task`, the abort or the timeout; True when `task` finished (it wins ties).

    If the caller is cancelled meanwhile (hard stop), `task` is abandoned before the cancellation
    propagates, so no read outlives its consumer.
    """
    try:
        await asyncio.wait({task, signal.wait()}, timeout=timeout,
                           return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        await _abandon(task)
        raise
    return task.done()


async def _abandon(task: asyncio.Future[_T]) -> _T | None:
    """Cancel `task` and wait until it has unwound; returns its result if it finished anyway."""
    task.cancel()
    await asyncio.wait({task})
    if task.cancelled() or task.exception() is not None:  # retrieves the exception: no warning
        return None
    return task.result()


async def _close(events: AsyncGenerator[ServerSentEvent, None], response: httpx.Response) -> None:
    try:
        await events.aclose()
    except Exception:  # the generator already failed; closing the response is what matters
        logger.debug("closing the event stream failed", exc_info=True)
    await response.aclose()


async def _error_body(response: httpx.Response, limit: int = 8192) -> bytes:
    """At most `limit` bytes of an error response, then closed: its message is for the user, and a
    body that fails to arrive is no reason to lose the status."""
    data = b""
    try:
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) >= limit:
                break
    except (httpx.HTTPError, httpx.StreamError):
        pass
    finally:
        await response.aclose()
    return data[:limit]
