"""Validation without pydantic for inputs it is sure of (issue 13); stdlib only.

Why: importing pydantic and building dsh's models was about half of a `dsh run --transcript`'s
start-up. The pydantic models stay the one definition of every schema; a `Schema` here is a table of
the same fields (`tests/test_lean.py` derives each table from its pydantic model and pins that they
agree, and feeds both the same generated inputs).

Contract: `validate(schema, data)` returns a `Record` only when pydantic would accept `data` and
produce the same values; otherwise it returns None and the caller validates with the pydantic model,
which produces the error (so error lines are pydantic's, by construction) or accepts an unusual
spelling. It is therefore strict where pydantic is lax: exact types (`1` is not a bool, `"1"` not an
int; an int is accepted as a float and converted, as pydantic does), aliases only (a field name that
differs from its alias declines), no unknown keys, no missing required keys.

A `Record` answers what the runtime asks of a model instance: attributes, `model_dump` (with
`by_alias`, `exclude_none`), `model_fields_set`, equality, hashing and `repr`; it is frozen.

Types, as tuples: `("str", constraints)`, `("int", constraints)`, `("float", constraints)`,
`("bool",)`, `("any",)`, `("lit", values)`, `("opt", type)`, `("list", type)`,
`("dict", key type, value type)`, `("model", schema name)`, `("or", (type, ...))`. Constraints:
`ge`, `gt`, `le`, `min_length`, `max_length`, `pattern` (anchored, whole string), `check` (a
function raising `ValueError`: pydantic's `AfterValidator`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FRESH", "REQUIRED", "Field", "Record", "Schema", "camel", "validate"]

REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()
"""The default of a required field."""
FRESH: Any = type("Fresh", (), {"__repr__": lambda self: "FRESH"})()
"""The default of a nested model field: that model with all its own defaults."""

_NOT_SURE = object()
_SURROGATE = re.compile("[\ud800-\udfff]")  # a lone surrogate (from a JSON escape): pydantic's to say
_INT_BOUND = 2**63  # beyond i64, pydantic-core's own int handling: not sure


def camel(name: str) -> str:
    """pydantic's `to_camel` for snake_case field names: `run_in_background` -> `runInBackground`."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@dataclass(frozen=True)
class Field:
    name: str
    alias: str
    type: tuple[Any, ...]
    default: Any = REQUIRED


@dataclass(eq=False)
class Schema:
    """One model's fields. `before` rewrites the input mapping (a pydantic `mode="before"` model
    validator); `after` is true when a built record passes the model's `mode="after"` validators
    (false: not sure, let pydantic answer)."""

    name: str
    fields: tuple[Field, ...]
    record: type[Record] | None = None
    before: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    after: Callable[[Any], bool] | None = None
    models: Mapping[str, Schema] = field(default_factory=dict)  # the schemas `("model", name)` names
    _by_alias: dict[str, Field] = field(init=False, repr=False)
    _fresh: Any = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        self._by_alias = {f.alias: f for f in self.fields}
        if self.record is None:
            self.record = type(self.name, (Record,), {"__slots__": ()})
        self.record._lean_fields = self.fields


class Record:
    """A validated model's values (see the module docstring); built only by `validate`."""

    __slots__ = ("__dict__", "_fields_set")
    _lean_fields: tuple[Field, ...] = ()
    _fields_set: frozenset[str]

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is frozen")

    @property
    def model_fields_set(self) -> set[str]:
        return set(self._fields_set)

    def model_dump(self, *, mode: str = "python", by_alias: bool = False, exclude_none: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self._lean_fields:
            value = self.__dict__[f.name]
            if exclude_none and value is None:
                continue
            out[f.alias if by_alias else f.name] = _dump(value, by_alias, exclude_none)
        return out

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, Record)
        return self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self), *self.__dict__.values()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}={self.__dict__[f.name]!r}" for f in self._lean_fields)
        return f"{type(self).__name__}({inner})"


def _dump(value: Any, by_alias: bool, exclude_none: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(by_alias=by_alias, exclude_none=exclude_none)
    if isinstance(value, list):
        return [_dump(v, by_alias, exclude_none) for v in value]
    if isinstance(value, dict):
        return {k: _dump(v, by_alias, exclude_none) for k, v in value.items()}
    return value


def validate(schema: Schema, data: Any) -> Any:
    """The record for `data`, or None when pydantic must answer (see the module docstring)."""
    value = _model(schema, data)
    return None if value is _NOT_SURE else value


def _model(schema: Schema, data: Any) -> Any:
    if type(data) is not dict:
        return _NOT_SURE
    if schema.before is not None:
        data = schema.before(data)
    values: dict[str, Any] = {}
    given: set[str] = set()
    for key, raw in data.items():
        f = schema._by_alias.get(key) if type(key) is str else None
        if f is None:
            return _NOT_SURE  # unknown key, a field's name instead of its alias, or a non-str key
        value = _value(schema, f.type, raw)
        if value is _NOT_SURE:
            return _NOT_SURE
        values[f.name] = value
        given.add(f.name)
    for f in schema.fields:
        if f.name in values:
            continue
        if f.default is REQUIRED:
            return _NOT_SURE
        if f.default is FRESH:
            values[f.name] = _fresh(schema.models[f.type[1]] if f.type[0] == "model" else schema)
        elif isinstance(f.default, list | dict):
            values[f.name] = type(f.default)(f.default)
        else:
            values[f.name] = f.default
    assert schema.record is not None
    record = object.__new__(schema.record)
    record.__dict__.update((f.name, values[f.name]) for f in schema.fields)
    object.__setattr__(record, "_fields_set", frozenset(given))
    if schema.after is not None and not schema.after(record):
        return _NOT_SURE
    return record


def _fresh(schema: Schema) -> Any:
    """The nested model with its own defaults (pydantic's default instance; built once)."""
    if schema._fresh is None:
        schema._fresh = _model(schema, {})
        assert schema._fresh is not _NOT_SURE, schema.name
    return schema._fresh


def _value(schema: Schema, kind: tuple[Any, ...], raw: Any) -> Any:
    tag = kind[0]
    if tag == "str":
        ok = type(raw) is str and (raw.isascii() or _SURROGATE.search(raw) is None)
        return raw if ok and _constrained(raw, kind[1], len(raw)) else _NOT_SURE
    if tag == "int":
        ok = type(raw) is int and -_INT_BOUND < raw < _INT_BOUND
        return raw if ok and _constrained(raw, kind[1], raw) else _NOT_SURE
    if tag == "float":
        if type(raw) is int:
            try:
                raw = float(raw)
            except OverflowError:
                return _NOT_SURE
        ok = type(raw) is float and math.isfinite(raw) and _constrained(raw, kind[1], raw)
        return raw if ok else _NOT_SURE
    if tag == "bool":
        return raw if type(raw) is bool else _NOT_SURE
    if tag == "any":
        return raw
    if tag == "lit":
        return raw if any(type(raw) is type(v) and raw == v for v in kind[1]) else _NOT_SURE
    if tag == "opt":
        return None if raw is None else _value(schema, kind[1], raw)
    if tag == "list":
        if type(raw) is not list:
            return _NOT_SURE
        out = [_value(schema, kind[1], item) for item in raw]
        return _NOT_SURE if any(v is _NOT_SURE for v in out) else out
    if tag == "dict":
        if type(raw) is not dict:
            return _NOT_SURE
        pairs = [(_value(schema, kind[1], k), _value(schema, kind[2], v)) for k, v in raw.items()]
        return _NOT_SURE if any(_NOT_SURE in pair for pair in pairs) else dict(pairs)
    if tag == "model":
        return _model(schema.models[kind[1]], raw)
    if tag == "or":  # accepted only when exactly one member accepts (their types are disjoint here)
        found = [v for v in (_value(schema, member, raw) for member in kind[1]) if v is not _NOT_SURE]
        return found[0] if len(found) == 1 else _NOT_SURE
    raise AssertionError(f"unknown lean type {tag!r}")


def _constrained(raw: Any, constraints: Mapping[str, Any], size: Any) -> bool:
    for name, bound in constraints.items():
        if name == "ge" and not size >= bound:
            return False
        if name == "gt" and not size > bound:
            return False
        if name == "le" and not size <= bound:
            return False
        if name == "min_length" and not size >= bound:
            return False
        if name == "max_length" and not size <= bound:
            return False
        if name == "pattern" and re.fullmatch(bound.removeprefix("^").removesuffix("$"), raw) is None:
            return False
        if name == "check":
            try:
                bound(raw)
            except ValueError:
                return False
    return True
