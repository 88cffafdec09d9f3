"""What the model saw (issue 11 item 1), through the CLI.

Each model request leaves `llm/request` in its session's log, before the provider is called; the
system prompt and the tool list it names are stored once per distinct value (`llm/system`,
`llm/tools`), all three `ignorable` so an older reader skips them. `dsh sessions show ID --requests`
prints them; `dsh run -v` / `DSH_LOG=debug` logs a line per request and reply to stderr and never
the API key.
"""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import httpx
import pytest
from cli_kit import log_events

from dsh.cli.logsetup import log_to_stderr
from dsh.loader.session import Session
from dsh.loader.session.requests import system_hash, tools_hash
from dsh.loader.texts import render
from sse_kit import SSE_HEADERS, delta, finish, sse

LLM_TYPES = ("llm/system", "llm/tools", "llm/request")
SECRET = "sk-test-0123456789abcdefSECRET"


def run_tree(dsh, home: Path) -> tuple[str, str]:
    result = dsh("run", "--json", "--transcript", "background-settlement", "--home", home)
    assert result.exit_code == 0, result.stderr
    start = next(r for r in map(json.loads, result.stdout.splitlines())
                 if r["type"] == "lifecycle" and r["name"] == "subagent/start")
    return start["parentSessionId"], start["sessionId"]


def test_each_request_logs_a_digest_before_its_reply_and_each_value_once(dsh, home):
    root, child = run_tree(dsh, home)

    for sid, tools in ((root, ["subagent", "send_message", "list_agents", "interrupt_agent"]),
                       (child, ["subagent", "send_message", "list_agents", "interrupt_agent", "report"])):
        events = log_events(home, sid)
        replies = [e for e in events if e["type"] == "assistant/message"]
        digests = [e for e in events if e["type"] == "llm/request"]
        systems = [e for e in events if e["type"] == "llm/system"]
        tool_lists = [e for e in events if e["type"] == "llm/tools"]
        assert len(digests) == len(replies) >= 1
        assert len(systems) == 1 and len(tool_lists) == 1  # stored once, though every request names them
        assert all(e.get("ignorable") is True for e in events if e["type"] in LLM_TYPES)
        for digest, reply in zip(digests, replies, strict=True):
            d = digest["data"]
            assert digest["seq"] < reply["seq"] and (d["turn"], d["step"]) == (reply["data"]["turn"], reply["data"]["step"])
            assert d["model"] == "replay" and d["toolNames"] == tools
            assert d["systemHash"] == systems[0]["data"]["hash"] == system_hash(systems[0]["data"]["text"])
            assert d["toolsHash"] == tool_lists[0]["data"]["hash"] == tools_hash(tool_lists[0]["data"]["tools"])
            # the message count is what derive_messages gave at that point of the log
            before = Session({"id": sid}, [e for e in events if e["seq"] < digest["seq"]]).derive_messages()
            assert d["messageCount"] == len(before)
        assert "Delegation:" in systems[0]["data"]["text"]  # the real prompt, sections included
        assert [t["name"] for t in tool_lists[0]["data"]["tools"]] == tools


def test_show_requests_prints_each_request_and_each_value_in_full_once(dsh, home):
    root, _child = run_tree(dsh, home)
    events = log_events(home, root)
    system = next(e["data"] for e in events if e["type"] == "llm/system")
    tools = next(e["data"] for e in events if e["type"] == "llm/tools")

    text = dsh("sessions", "show", root, "--requests", "--home", home)
    raw = dsh("sessions", "show", root, "--requests", "--json", "--home", home)

    assert (text.exit_code, text.stderr, raw.exit_code, raw.stderr) == (0, "", 0, "")
    rows = [json.loads(line) for line in raw.stdout.splitlines()]
    assert [(r["turn"], r["step"], r["messageCount"]) for r in rows] == [(1, 1, 1), (1, 2, 3), (1, 3, 5)]
    assert all(r["system"] == system["text"] and r["tools"] == tools["tools"] for r in rows)
    assert all(r["model"] == "replay" and r["systemHash"] == system["hash"] for r in rows)
    lines = text.stdout.splitlines()
    assert lines[0] == f"request 1  seq {rows[0]['seq']}  turn 1 step 1  model replay  messages 1"
    assert lines[1] == f"  system {system['hash']}:"
    assert [f"    {line}" for line in system["text"].splitlines()] == lines[2:2 + len(system["text"].splitlines())]
    assert text.stdout.count("    subagent: Hand a self-contained task") == 1  # the tools in full, once
    assert f"  system {system['hash']} (as in request 1)" in lines
    assert f"  tools {tools['hash']}: subagent, send_message, list_agents, interrupt_agent (as in request 1)" in lines


def test_show_requests_of_a_log_without_digests_says_so(dsh, home):
    root, _child = run_tree(dsh, home)
    path = home / "sessions" / root / "session.jsonl"
    header, *lines = path.read_text().splitlines()
    kept = [json.loads(line) for line in lines if json.loads(line)["type"] not in LLM_TYPES]
    path.write_text("\n".join([header, *(json.dumps({**e, "seq": i}) for i, e in enumerate(kept))]) + "\n")

    result = dsh("sessions", "show", root, "--requests", "--home", home)

    assert (result.exit_code, result.stdout) == (0, "")
    assert result.stderr == render("T-CLI-NO-REQUESTS", id=root) + "\n"


@pytest.mark.parametrize("how", [["-v"], ["--verbose"], "DSH_LOG"], ids=["-v", "--verbose", "DSH_LOG=debug"])
def test_verbose_logs_each_request_and_reply_to_stderr_and_never_the_key(dsh, home, llm, how):
    body = sse(delta(content="four"), finish("stop"), "[DONE]")
    route = llm.post("https://api.openai.com/v1/chat/completions").mock(
        return_value=httpx.Response(200, headers=SSE_HEADERS, content=body))
    flags = how if isinstance(how, list) else []
    env = {"OPENAI_API_KEY": SECRET, **({"DSH_LOG": "debug"} if how == "DSH_LOG" else {})}

    result = dsh("run", "two plus two?", "--overlay", "openai", "--home", home, *flags, env=env)

    assert (result.exit_code, result.stdout) == (0, "four\n"), result.stderr
    assert route.calls.last.request.headers["authorization"] == f"Bearer {SECRET}"  # it was sent ...
    root = next(p.name for p in (home / "sessions").iterdir())
    request = next(line for line in result.stderr.splitlines() if "model request" in line)
    assert request.startswith(f"dsh: DEBUG dsh.loader.agent.loop: model request {root} turn 1 step 1: model gpt-4o-mini, "
                              "1 messages, system ")
    assert f"model reply {root} turn 1 step 1: finish stop, blocks text" in result.stderr
    assert "HTTP Request: POST https://api.openai.com/v1/chat/completions" in result.stderr
    # ... and appears nowhere else: not in stderr, stdout, or any file under the home
    assert SECRET not in result.stderr + result.stdout and "Bearer" not in result.stderr
    assert all(SECRET.encode() not in p.read_bytes() for p in home.rglob("*") if p.is_file())


def test_without_verbose_no_request_lines_reach_stderr(dsh, home):
    result = dsh("run", "--transcript", "hello", "--home", home)

    assert (result.exit_code, result.stdout, result.stderr) == (0, "Hello from dsh.\n", "")


def test_the_stderr_handler_blanks_a_secret_a_record_carries_and_is_removed_afterwards(monkeypatch):
    """The second line of defence: even a record that names the key prints `***`."""
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    log = logging.getLogger("dsh.loader.test_requests")
    before = list(logging.getLogger("dsh.loader").handlers)

    with log_to_stderr(logging.DEBUG, [SECRET]):
        log.debug("header was Bearer %s", SECRET)
    log.warning("after the block")

    first, *after = err.getvalue().splitlines()
    assert first == "dsh: DEBUG dsh.loader.test_requests: header was Bearer ***"
    # After the block our handler is gone: the warning reaches stderr, if at all, only through the
    # process's own `dsh: …` warning lines (installed once by an earlier `dsh run` in this worker).
    assert after in ([], ["dsh: after the block"])
    assert logging.getLogger("dsh.loader").handlers == before
