"""Failure classification for the OpenAI-compatible provider (SPEC §13.2): an HTTP status, a
transport error or a read gap becomes one `Failure`, and from it one `ProviderError` code.

Split from `openai.py` so the streaming module stays about the stream; the two are one seam (STYLE
§4): nothing else in dsh turns httpx errors into codes. Messages name a status, an exception type
and a code, never a header, a body or the key.

Issue 16 item 4 (third-party servers):
- HTTP 529 ("overloaded", sent by Anthropic-style gateways and LiteLLM) is retried like 503 and,
  when the attempts run out, reported as `PROVIDER_OVERLOADED`.
- The wait before a retry reads `retry-after-ms` first (milliseconds, which the OpenAI SDKs honour
  and llmock and LiteLLM send beside a rounded-up `Retry-After`), then `Retry-After` (seconds or an
  HTTP date). Either may be absent or unparsable; then the full jitter applies.
- A 404 from a base URL whose path has no `/v1` segment carries T-PROVIDER-NO-V1: most servers
  (Ollama, vLLM, LiteLLM, OpenAI itself) answer at `/v1/chat/completions`, and a bare 404 gave no
  clue. The suggestion drops any userinfo and query from the URL.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
from dataclasses import dataclass
from datetime import datetime, timezone

import httpx

from dsh.loader.errors import ProviderCode, ProviderError
from dsh.loader.texts import render

__all__ = [
    "Failure", "ReadGap", "gap_failure", "provider_message", "retry_after", "safe_url", "status_failure",
    "transport_failure",
]

# Issue 11 item 5: the provider's own words on an HTTP error, trimmed to one short line.
MESSAGE_LIMIT = 200
_TOKEN = re.compile(r"\b(?:sk|pk|rk|key)-[A-Za-z0-9_\-]{6,}|\bBearer\s+\S+", re.IGNORECASE)

_RETRIED_STATUS: dict[int, ProviderCode] = {429: "RATE_LIMITED", 500: "PROVIDER_UNAVAILABLE",
                                            502: "PROVIDER_UNAVAILABLE", 503: "PROVIDER_UNAVAILABLE",
                                            504: "PROVIDER_UNAVAILABLE", 529: "PROVIDER_OVERLOADED"}


class ReadGap(Exception):
    """No event arrived within `read_timeout`; becomes `TIMEOUT` (retried only before the first)."""


@dataclass
class Failure:
    """One failed attempt before the first event."""

    code: ProviderCode
    what: str  # e.g. "the model provider answered HTTP 503"; never headers, bodies or the key
    status: int | None = None
    retryable: bool = False
    retry_after: float | None = None
    cause: BaseException | None = None
    hint: str | None = None  # what the user may have got wrong, after the code

    def error(self, attempts: int) -> ProviderError:
        tail = f" after {attempts} attempts" if self.retryable and attempts > 1 else ""
        hint = f"; {self.hint}" if self.hint else ""
        return ProviderError(self.code, f"{self.what} ({self.code}){tail}{hint}", status=self.status)


def status_failure(response: httpx.Response, base_url: str | None = None, detail: str | None = None) -> Failure:
    """`detail` is the provider's own message (`provider_message`), already trimmed and key-free."""
    status = response.status_code
    what = f"the model provider answered HTTP {status}" + (f": {detail}" if detail else "")
    if status in _RETRIED_STATUS:
        return Failure(_RETRIED_STATUS[status], what, status=status, retryable=True,
                        retry_after=retry_after(response.headers))
    code: ProviderCode
    if status in (401, 403):
        code = "AUTH"
    elif status == 400:
        code = "BAD_REQUEST"
    elif status >= 500:
        code = "PROVIDER_UNAVAILABLE"
    else:
        code = "PROVIDER_REJECTED"
    hint = _missing_v1_hint(base_url) if status == 404 and base_url is not None else None
    return Failure(code, what, status=status, hint=hint)


def _missing_v1_hint(base_url: str) -> str | None:
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return None
    if "v1" in url.path.split("/"):
        return None
    base = url.copy_with(userinfo=b"", query=None, fragment=None)
    suggested = str(base).rstrip("/") + "/v1/chat/completions"
    return render("T-PROVIDER-NO-V1", suggested=suggested)


def transport_failure(exc: BaseException, *, retryable: bool = False, url: str | None = None) -> Failure:
    """`retryable` asks for a retry; only transport errors (timeouts, connect, read) get one.
    `url` (the request's) is named without credentials or query (`safe_url`)."""
    retryable = retryable and isinstance(exc, httpx.TransportError)
    kind = type(exc).__name__
    provider = "the model provider" + (f" at {safe_url(url)}" if url else "")
    if isinstance(exc, httpx.TimeoutException):
        return Failure("TIMEOUT", f"{provider} timed out ({kind})", retryable=retryable,
                        cause=exc)
    what = (f"could not connect to {provider}" if isinstance(exc, httpx.ConnectError)
            else f"the connection to {provider} failed")
    return Failure("NETWORK", f"{what} ({kind})", retryable=retryable, cause=exc)


def safe_url(url: str) -> str:
    """`url` without userinfo, query or fragment: a key may ride in any of them."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "(an invalid URL)"
    return str(parsed.copy_with(userinfo=b"", query=None, fragment=None))


def provider_message(body: bytes, secrets: tuple[str | None, ...] = ()) -> str | None:
    """The message an HTTP error body carries (`{"error": {"message": …}}`, `{"error": …}`,
    `{"message": …}`, `{"detail": …}`, or short plain text), on one line, at most MESSAGE_LIMIT
    characters, with every secret and anything shaped like a key or bearer token replaced."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if data is not None:
        found = _message_in(data)
        if found is None:
            return None
        text = found
    elif text.startswith("<"):  # an HTML error page says nothing a line can carry
        return None
    for secret in secrets:
        if secret:
            text = text.replace(secret, "<redacted>")
    text = _TOKEN.sub("<redacted>", " ".join(text.split()))
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _message_in(data: object) -> str | None:
    if isinstance(data, str):
        return data or None
    if isinstance(data, dict):
        for key in ("error", "message", "detail"):
            if key in data:
                found = _message_in(data[key])
                if found:
                    return found
    return None


def gap_failure(read_timeout: float, *, retryable: bool = False) -> Failure:
    return Failure("TIMEOUT", f"the model provider sent nothing for {read_timeout:g} s",
                    retryable=retryable)


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait as the server asked: `retry-after-ms` wins over `Retry-After`."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis.strip())
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(0.0, value / 1000.0)
    return _retry_after_seconds(headers.get("retry-after"))


def _retry_after_seconds(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
