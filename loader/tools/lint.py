"""Transcript lint (issue 10): tool calls in replies checked against the real tool schemas.

A transcript is a script for the model, and the model's tool calls are what the runtime validates
with each tool's `parameters` (§12.1; `loader.tools.params`). Without a lint, `report: {message: …}` or a
made-up tool name loads fine and only shows up as an `INVALID_ARGS` / unknown-tool result deep in a
flow. `lint_transcript` checks, for every `toolCalls` entry of every reply:

- the name is a tool the agent can see (§8.1): the root has `subagent`, `send_message`,
  `list_agents`, `interrupt_agent`; a background child also `report`; a one-shot child
  (`run_in_background: false`) none;
- mapping arguments (and string arguments that parse as a JSON object) validate against the
  tool's parameter model; a string that is not JSON is kept, as the recorder writes the model's
  invalid JSON verbatim (§15.5) and the runtime answers it with `INVALID_ARGS`;
- every `{{child:<callId>}}` names a `subagent` tool call of the transcript and every
  `{{session:<agentKey>}}` an agent key (resolved statically, so the run cannot fail on it).

Problems are reported like every other transcript error, one line each:
`<file>:<line>:<col>: <key.path>: <problem>` (`TranscriptError`, exit 2).
"""

from __future__ import annotations

import json
import re
from typing import Any

from dsh.loader.errors import TranscriptError
from dsh.loader.tools.params import PARAMETERS, Parameters
from dsh.loader.transcripts import Transcript
from dsh.loader.yamlpos import Loc, key_path, load_yaml_with_marks, locate

__all__ = ["TOOL_PARAMETERS", "lint_transcript", "transcript_problems"]

TOOL_PARAMETERS: dict[str, Parameters] = PARAMETERS  # `.model` is each tool's pydantic model
_ROOT_TOOLS = ("subagent", "send_message", "list_agents", "interrupt_agent")
_ARG_TEXT = {"extra_forbidden": "unknown argument", "missing": "required argument is missing"}
_PLACEHOLDER_RE = re.compile(r"\{\{(child|session):([^{}]*)\}\}")


def _visible_tools(transcript: Transcript) -> dict[str, tuple[str, ...]]:
    """Tools per agent key, from how each child is spawned (§8.1)."""
    one_shot: set[str] = set()
    for script in transcript.spec.agents.values():
        for reply in script.replies:
            for call in reply.tool_calls or []:
                args = _as_mapping(call.arguments)
                if call.name == "subagent" and args is not None and args.get("run_in_background") is False:
                    one_shot.add(call.id)
    tools: dict[str, tuple[str, ...]] = {}
    for key, script in transcript.spec.agents.items():
        if key == "root":
            tools[key] = _ROOT_TOOLS
        elif script.spawned_by is not None and script.spawned_by in one_shot:
            tools[key] = ()
        else:
            tools[key] = (*_ROOT_TOOLS, "report")
    return tools


def _as_mapping(arguments: dict[str, Any] | str) -> dict[str, Any] | None:
    if isinstance(arguments, dict):
        return arguments
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def transcript_problems(transcript: Transcript) -> list[tuple[Loc, str]]:
    """Every problem as `(loc in the document, text)`, in document order."""
    spec = transcript.spec
    spawn_calls = {
        call.id for s in spec.agents.values() for r in s.replies for call in r.tool_calls or [] if call.name == "subagent"
    }
    visible = _visible_tools(transcript)
    keys = set(spec.agents)  # once: a set per reply made the lint O(N²) in a fan-out's N (issue 13)
    problems: list[tuple[Loc, str]] = []
    for key, script in spec.agents.items():
        for r, reply in enumerate(script.replies):
            base: Loc = ("agents", key, "replies", r)
            for c, call in enumerate(reply.tool_calls or []):
                loc: Loc = (*base, "toolCalls", c)
                if call.name not in visible[key]:
                    can = ", ".join(visible[key]) or "no tools"
                    known = "" if call.name in TOOL_PARAMETERS else "unknown tool; "
                    problems.append(((*loc, "name"), f"{known}{key} cannot call {call.name!r} (it can call: {can})"))
                    continue
                args = _as_mapping(call.arguments)
                if args is None:
                    continue  # the model's own invalid JSON: the runtime answers INVALID_ARGS
                try:
                    TOOL_PARAMETERS[call.name].model_validate(args)  # lean when sure (issue 13)
                except Exception as exc:
                    from pydantic import ValidationError  # loaded: only the pydantic fallback raises it

                    if not isinstance(exc, ValidationError):
                        raise
                    for err in exc.errors():
                        where: Loc = (*loc, "arguments", *err["loc"])
                        if not isinstance(call.arguments, dict):
                            where = (*loc, "arguments")
                        text = _ARG_TEXT.get(err["type"], err["msg"])
                        problems.append((where, f"{call.name}: {text}"))
            problems.extend(_placeholder_problems(reply.model_dump(by_alias=True, exclude_none=True), base,
                                                  spawn_calls, keys))
    return problems


def _placeholder_problems(value: Any, loc: Loc, spawn_calls: set[str], keys: set[str]) -> list[tuple[Loc, str]]:
    if isinstance(value, str):
        out = []
        for match in _PLACEHOLDER_RE.finditer(value):
            kind, name = match.group(1), match.group(2)
            if kind == "child" and name not in spawn_calls:
                out.append((loc, f"{match.group(0)}: no subagent tool call has id {name!r}"))
            elif kind == "session" and name not in keys:
                out.append((loc, f"{match.group(0)}: no agent {name!r} in this transcript"))
        return out
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _placeholder_problems(v, (*loc, k), spawn_calls, keys)]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _placeholder_problems(v, (*loc, i), spawn_calls, keys)]
    return []


def lint_transcript(transcript: Transcript) -> None:
    """Raise `TranscriptError` listing every problem as `file:line:col: key.path: problem`."""
    problems = transcript_problems(transcript)
    if not problems:
        return
    data = load_yaml_with_marks(transcript.path)  # positions only; parsed once more on failure
    located = []
    for loc, text in problems:
        where = _document_loc(data, loc)
        line, col = locate(data, where)
        located.append((line, col, f"{transcript.path}:{line}:{col}: {key_path(data, where)}: {text}"))
    raise TranscriptError("\n".join(text for _, _, text in sorted(located, key=lambda p: (p[0], p[1]))))


def _document_loc(data: Any, loc: Loc) -> Loc:
    """`loc` with model field names mapped back to the document's spelling (camelCase keys)."""
    out: list[int | str] = []
    node = data
    for part in loc:
        if isinstance(part, str) and isinstance(node, dict) and part not in node:
            camel = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), part)
            part = camel if camel in node else part
        out.append(part)
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            node = None
    return tuple(out)
