"""The configuration schema as `loader.lean` tables (issue 13): `compose(lean=True)` (what `dsh run`
asks for) validates the merged layers without importing pydantic when the lean validator is sure,
and with `Config.model_validate` (and its error lines) otherwise. `tests/test_lean.py` derives these
tables from the pydantic models in `schema.py` and pins that they agree.

The two value checks (`http_url`, `env_name`) live here, pydantic-free; `schema.py` uses them as
its `AfterValidator`s, so both validators run the same function.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from dsh.loader.lean import FRESH, Field, Schema, camel, validate
from dsh.loader.texts import TEXTS

__all__ = ["CONFIG", "MAX_DURATION_SECONDS", "MAX_GRACE_SECONDS", "MAX_WORKFLOW_TASK_SECONDS", "SCHEMAS", "env_name", "http_url", "lean_config"]

_URL = re.compile(r"^https?://[^\s/]+\S*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Issue 15 item 7: no setting is infinite (see schema.py).
MAX_DURATION_SECONDS = 86_400.0
MAX_GRACE_SECONDS = 3_600.0
# Temporal refuses a longer workflow task timeout than two minutes.
MAX_WORKFLOW_TASK_SECONDS = 120.0


def http_url(value: str) -> str:
    # Kept as the string the user wrote: pydantic's HttpUrl would append "/" to a bare host and
    # `dsh config show` would then print a value nobody configured.
    if not _URL.match(value):
        raise ValueError("must be an http:// or https:// URL")
    return value


def env_name(value: str) -> str:
    if not _ENV_NAME.match(value):
        raise ValueError("must be an environment variable name (letters, digits, underscores)")
    return value


def _f(name: str, kind: tuple[Any, ...], default: Any) -> Field:
    return Field(name, camel(name), kind, default)


def _duration(low: str) -> tuple[Any, ...]:
    return ("float", {low: 0, "le": MAX_DURATION_SECONDS})


def _ints(ge: int, le: int | None = None) -> tuple[Any, ...]:
    return ("int", {"ge": ge} if le is None else {"ge": ge, "le": le})


def _model(name: str) -> tuple[str, str]:
    return ("model", name)


_SECTIONS = (
    Schema("RetryConfig", (
        _f("max_attempts", _ints(1, 10), 4),
        _f("initial_backoff_seconds", _duration("ge"), 1.0),
        _f("max_backoff_seconds", _duration("ge"), 30.0),
    )),
    Schema("ModelConfig", (
        _f("provider", ("lit", ("openai-compatible", "replay")), "openai-compatible"),
        _f("base_url", ("str", {"check": http_url}), "https://api.deepseek.com"),
        _f("model", ("str", {"min_length": 1}), "deepseek-chat"),
        _f("api_key_env", ("opt", ("str", {"check": env_name})), "DEEPSEEK_API_KEY"),
        _f("max_tokens", ("opt", _ints(1)), None),
        _f("temperature", ("opt", ("float", {"ge": 0, "le": 2})), None),
        _f("connect_timeout_seconds", _duration("gt"), 10.0),
        _f("read_timeout_seconds", _duration("gt"), 120.0),
        _f("retry", _model("RetryConfig"), FRESH),
    )),
    Schema("AgentConfig", (
        _f("system_prompt", ("str", {}), TEXTS["T-SYSTEM-DEFAULT"]),
        _f("append_system_prompt", ("opt", ("str", {})), None),
        _f("max_parallel_tool_calls", _ints(1, 64), 10),
        _f("max_steps_per_turn", _ints(1, 1000), 100),
    )),
    Schema("SubagentsConfig", (
        _f("report_delivery", ("lit", ("wakeup", "quiet")), "wakeup"),
        _f("max_depth", _ints(0, 16), 3),
    )),
    Schema("PersistenceConfig", (_f("batch_delay_ms", _ints(0, 5000), 200), _f("fsync", ("bool",), True))),
    Schema("RunConfig", (
        _f("shutdown_grace_seconds", ("float", {"ge": 0, "le": MAX_GRACE_SECONDS}), 5.0),
        _f("parked", ("lit", ("wait", "release")), "wait"),
    )),
    Schema("LimitsConfig", (
        _f("max_children", _ints(0, 100_000), 200),
        _f("max_requests", _ints(1, 1_000_000), 2_000),
        _f("max_tokens", _ints(1, 1_000_000_000), 2_000_000),
    )),
    Schema("TestingConfig", (_f("fences", ("bool",), False), _f("fence_timeout_seconds", _duration("gt"), 10.0))),
    Schema("TemporalConfig", (
        _f("address", ("str", {"min_length": 1}), "localhost:7233"),
        _f("namespace", ("str", {"min_length": 1}), "default"),
        _f("task_queue", ("str", {"min_length": 1}), "dsh"),
        _f("continue_as_new_after", ("opt", _ints(1)), None),
        _f("continue_as_new_updates", _ints(1), 1_000),
        _f("heartbeat_timeout_seconds", _duration("gt"), 60.0),
        _f("max_running_children", _ints(1), 2_000),
        _f("turn_workflows", ("lit", ("root", "all", "none")), "root"),
        _f("workflow_task_timeout_seconds", ("opt", ("float", {"gt": 0, "le": MAX_WORKFLOW_TASK_SECONDS})), None),
    )),
)
CONFIG = Schema("Config", (
    _f("engine", ("lit", ("local", "temporal")), "local"),
    _f("model", _model("ModelConfig"), FRESH),
    _f("agent", _model("AgentConfig"), FRESH),
    _f("subagents", _model("SubagentsConfig"), FRESH),
    _f("persistence", _model("PersistenceConfig"), FRESH),
    _f("run", _model("RunConfig"), FRESH),
    _f("limits", _model("LimitsConfig"), FRESH),
    _f("testing", _model("TestingConfig"), FRESH),
    _f("temporal", _model("TemporalConfig"), FRESH),
))
SCHEMAS: dict[str, Schema] = {schema.name: schema for schema in (*_SECTIONS, CONFIG)}
for _schema in SCHEMAS.values():
    _schema.models = SCHEMAS


def lean_config(values: Any, strings: Iterable[tuple[Any, ...]] = ()) -> Any:
    """A `Config`-shaped record of the merged layers, or None: validate them with pydantic instead.

    `strings` are the paths whose value came from an environment variable: a string there that
    names a bool or a number is what pydantic parses in lax mode, and is parsed here first where
    `_from_string` is sure of the result (else pydantic answers)."""
    for path in strings:
        values = _parsed(values, tuple(path))
        if values is None:
            return None
    return validate(CONFIG, values)


_INT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})")
_FLOAT_TEXT = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]{1,17})?")
_BOOL_TEXT = {"true": True, "false": False}


def _parsed(values: Any, path: tuple[Any, ...]) -> Any:
    """`values` with the string at `path` parsed as pydantic would (a copy along the path), the
    same `values` when there is nothing to parse, or None when not sure."""
    node = values
    kind: tuple[Any, ...] = ("model", "Config")
    for key in path:
        if kind[0] != "model" or type(node) is not dict or key not in node:
            return values  # not a leaf of the tables: validation declines, pydantic reports it
        schema = SCHEMAS[kind[1]]
        field = next((f for f in schema.fields if f.alias == key), None)
        if field is None:
            return values
        kind, node = field.type, node[key]
    if type(node) is not str:
        return values
    parsed = _from_string(kind[1] if kind[0] == "opt" else kind, node)
    if parsed is _UNSURE:
        return None
    return values if parsed is node else _replaced(values, path, parsed)  # a string field keeps it


_UNSURE: Any = object()


def _from_string(kind: tuple[Any, ...], text: str) -> Any:
    """pydantic's lax parse of `text` for a field of `kind`, in the spellings where it is certain;
    a string field keeps it. `_UNSURE` otherwise."""
    tag = kind[0]
    if tag in ("str", "lit"):
        return text
    if tag == "bool":
        return _BOOL_TEXT.get(text, _UNSURE)
    if tag == "int" and _INT_TEXT.fullmatch(text):
        return int(text)
    if tag == "float" and _FLOAT_TEXT.fullmatch(text):
        return float(text)
    return _UNSURE


def _replaced(values: dict[str, Any], path: tuple[Any, ...], leaf: Any) -> dict[str, Any]:
    head, *rest = path
    out = dict(values)
    out[head] = _replaced(values[head], tuple(rest), leaf) if rest else leaf
    return out
