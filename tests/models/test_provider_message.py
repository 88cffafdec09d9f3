"""The provider's own words on an HTTP error (issue 11 item 5): which body shapes yield a message,
trimmed to one line of at most MESSAGE_LIMIT characters, with the key and key-shaped tokens gone."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from dsh.loader.abort import AbortController, Aborted
from dsh.loader.models._openai_failures import MESSAGE_LIMIT, provider_message, safe_url

# The provider fixtures and stream doubles of the provider's own tests (fixtures by import).
from .test_openai import URL, ByteChunks, Retries, clock, make_provider, request  # noqa: F401


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param({"error": {"message": "model not found", "type": "x"}}, "model not found", id="openai-shape"),
    pytest.param({"error": "rate limited"}, "rate limited", id="error-string"),
    pytest.param({"message": "bad\n  request"}, "bad request", id="message-one-line"),
    pytest.param({"detail": "Not Found"}, "Not Found", id="fastapi-detail"),
    pytest.param({"status": 500}, None, id="no-message"),
    pytest.param("upstream timed out", "upstream timed out", id="plain-text"),
    pytest.param("<html><body>502</body></html>", None, id="html-page"),
    pytest.param("", None, id="empty"),
])
def test_the_message_is_read_from_the_common_body_shapes(body, expected):
    raw = (body if isinstance(body, str) else json.dumps(body)).encode()
    assert provider_message(raw) == expected


def test_the_key_and_key_shaped_tokens_are_redacted():
    text = provider_message(b'{"error": {"message": "key abc123secret is wrong; got Bearer xyz and sk-AbCdEf123456"}}',
                            ("abc123secret",))
    assert text == "key <redacted> is wrong; got <redacted> and <redacted>"


def test_a_long_message_is_cut_to_the_limit():
    text = provider_message(json.dumps({"message": "x" * 1000}).encode())
    assert text is not None and len(text) == MESSAGE_LIMIT and text.endswith("…")


def test_a_url_is_named_without_credentials_or_query():
    assert safe_url("http://me:pw@host:8000/v1/chat/completions?api-key=k#f") == "http://host:8000/v1/chat/completions"


async def test_abort_ends_a_stalled_error_body_read_and_closes_the_response(llm, make_provider):
    """The error body is read like any other (§13.2): a body that stalls never holds back a cancel."""
    body = ByteChunks(b'{"error": {"message": "bad ke', stall=True)
    llm.post(URL).mock(return_value=httpx.Response(401, stream=body))
    ctrl = AbortController()
    pending = asyncio.ensure_future(anext(make_provider().stream(request(), ctrl.signal, Retries())))
    await body.stalled.wait()
    ctrl.abort({"kind": "user"})

    with pytest.raises(Aborted):
        await asyncio.wait_for(pending, 10)  # a loud backstop only: the abort ends it at once
    assert body.closed and body.unwound and not body.never.is_set()
