"""A small OpenAI-compatible chat-completions server on 127.0.0.1, serving scripted SSE streams.

respx patches this process's httpx only, and a Temporal worker may be another process: this is a
real socket every worker reaches. `reply(body)` picks the answer from the request itself (who asks
is read from the messages, so concurrent agents need no ordering); each request is kept, with its
`Authorization` header, so a test can count what was sent and with which key. A reply may be held
until the test lets it go (`Reply.hold`), which is how a test knows a request is in flight.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sse_kit import delta, finish, sse, usage

BACKSTOP = 120.0  # a held reply is let go after this at the latest: a loud failure, never an order


@dataclass
class Reply:
    """One answer: an SSE body, or an HTTP error `status` with a JSON error body."""

    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # answer only once set (the request is `arrived` meanwhile)
    arrived: threading.Event = field(default_factory=threading.Event)


@dataclass
class Gate:
    """Holds one reply: `arrived` once the server has its request, answered once `let_go` is set."""

    let_go: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)

    def hold(self, reply: Reply) -> Reply:
        reply.hold, reply.arrived = self.let_go, self.arrived
        return reply


def text(content: str, prompt: int = 10, completion: int = 5) -> Reply:
    return Reply(sse(delta(content=content), finish("stop"), usage(prompt, completion), "[DONE]"))


def tool_call(call_id: str, name: str, arguments: dict[str, Any], prompt: int = 10, completion: int = 5) -> Reply:
    call = {"index": 0, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}
    return Reply(sse(delta(tool_calls=[call]), finish("tool_calls"), usage(prompt, completion), "[DONE]"))


def error(status: int, code: str = "error", retry_after: str | None = None) -> Reply:
    body = json.dumps({"error": {"message": f"scripted {status}", "code": code}}).encode()
    return Reply(body, status=status, headers={"Retry-After": retry_after} if retry_after is not None else {})


@dataclass
class Seen:
    body: dict[str, Any]
    authorization: str | None


class ScriptedServer:
    def __init__(self, reply: Callable[[dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
                with server.lock:
                    server.seen.append(Seen(body, self.headers.get("Authorization")))
                    answer = server.reply(body)
                answer.arrived.set()
                if answer.hold is not None:
                    answer.hold.wait(BACKSTOP)
                try:
                    self.send_response(answer.status)
                    kind = "text/event-stream" if answer.status == 200 else "application/json"
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(answer.body)))
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(answer.body)
                except OSError:
                    pass  # the client (a killed worker) is gone

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@contextmanager
def scripted_server(reply: Callable[[dict[str, Any]], Reply]) -> Iterator[ScriptedServer]:
    server = ScriptedServer(reply)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()


def first_user_text(body: dict[str, Any]) -> str:
    """Who asks: an agent's first user message (the task of the root, a child's prompt)."""
    return next(str(m["content"]) for m in body["messages"] if m["role"] == "user")
