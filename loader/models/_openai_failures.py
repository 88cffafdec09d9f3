"""Failure classification for the OpenAI-compatible provider (SPEC §13.2): an HTTP status, a
transport error or a read gap becomes one `Failure`, and from it one `ProviderError` code.

Split from `openai.py` so the streaming module stays about the stream; the two are one seam (STYLE
§4): nothing else in dsh turns httpx errors into codes. Messages name a status, an exception type
and a code, never a header, a body or the key.
"""

from __future__ import annotations

import email.utils
import math
from dataclasses import dataclass
from datetime import datetime, timezone

import httpx

from loader.errors import ProviderCode, ProviderError

__all__ = ["Failure", "ReadGap", "gap_failure", "status_failure", "transport_failure"]

_RETRIED_STATUS: dict[int, ProviderCode] = {429: "RATE_LIMITED", 500: "PROVIDER_UNAVAILABLE",
                                            502: "PROVIDER_UNAVAILABLE", 503: "PROVIDER_UNAVAILABLE",
                                            504: "PROVIDER_UNAVAILABLE"}


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

    def error(self, attempts: int) -> ProviderError:
        tail = f" after {attempts} attempts" if self.retryable and attempts > 1 else ""
        return ProviderError(self.code, f"{self.what} ({self.code}){tail}", status=self.status)


def status_failure(response: httpx.Response) -> Failure:
    status = response.status_code
    what = f"the model provider answered HTTP {status}"
    if status in _RETRIED_STATUS:
        return Failure(_RETRIED_STATUS[status], what, status=status, retryable=True,
                        retry_after=_retry_after(response.headers.get("retry-after")))
    code: ProviderCode
    if status in (401, 403):
        code = "AUTH"
    elif status == 400:
        code = "BAD_REQUEST"
    elif status >= 500:
        code = "PROVIDER_UNAVAILABLE"
    else:
        code = "PROVIDER_REJECTED"
    return Failure(code, what, status=status)


def transport_failure(exc: BaseException, *, retryable: bool = False) -> Failure:
    """`retryable` asks for a retry; only transport errors (timeouts, connect, read) get one."""
    retryable = retryable and isinstance(exc, httpx.TransportError)
    kind = type(exc).__name__
    if isinstance(exc, httpx.TimeoutException):
        return Failure("TIMEOUT", f"the model provider timed out ({kind})", retryable=retryable,
                        cause=exc)
    what = ("could not connect to the model provider" if isinstance(exc, httpx.ConnectError)
            else "the connection to the model provider failed")
    return Failure("NETWORK", f"{what} ({kind})", retryable=retryable, cause=exc)


def gap_failure(read_timeout: float, *, retryable: bool = False) -> Failure:
    return Failure("TIMEOUT", f"the model provider sent nothing for {read_timeout:g} s",
                    retryable=retryable)


def _retry_after(value: str | None) -> float | None:
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
