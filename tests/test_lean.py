"""The lean validators (issue 13, `loader/lean.py`) agree with the pydantic models they stand in for.

1. Each lean table is derived here from its pydantic model (fields, aliases, types, constraints,
   defaults, the model validators' presence) and must equal the table the runtime uses.
2. Generated inputs, valid and not, go to both: whenever the lean validator accepts, pydantic accepts
   too and produces the same values (and the same derived properties); when it declines, the caller
   falls back to pydantic, so the answer (and error line) is pydantic's by construction.
3. Every shipped transcript and profile takes the lean road (else the fast path would never apply),
   and a lean spec behaves as the pydantic one: forms, finish reasons, fences, lint problems.
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

import annotated_types
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, StringConstraints, ValidationError
from pydantic.fields import FieldInfo

from dsh.loader import lean as lean_mod
from dsh.loader.config import lean as config_lean
from dsh.loader.config import schema as config_schema
from dsh.loader.host import methods, params as host_params
from dsh.loader.lean import FRESH, REQUIRED, Field, Record, Schema, validate
from dsh.loader.tools import args as tool_args
from dsh.loader.tools.lint import transcript_problems
from dsh.loader.tools.params import PARAMETERS
from dsh.loader.transcripts import fence_schema, load_transcript
from dsh.loader.transcripts import lean as transcript_lean
from dsh.loader.transcripts import schema as transcript_schema
from dsh.loader.errors import TranscriptError

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "transcripts").glob("*.yaml"))

# ---- 1. the tables are the models ------------------------------------------------------------------


def _constraints(metadata: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in metadata:
        if isinstance(item, annotated_types.Ge):
            out["ge"] = item.ge
        elif isinstance(item, annotated_types.Gt):
            out["gt"] = item.gt
        elif isinstance(item, annotated_types.Le):
            out["le"] = item.le
        elif isinstance(item, annotated_types.MinLen):
            out["min_length"] = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            out["max_length"] = item.max_length
        elif isinstance(item, StringConstraints):
            out.update({k: v for k, v in (("min_length", item.min_length), ("max_length", item.max_length),
                                          ("pattern", item.pattern)) if v is not None})
        elif isinstance(item, AfterValidator):
            out["check"] = item.func
        elif isinstance(item, FieldInfo):  # `Annotated[int, Field(ge=1)]` inside an Optional
            out.update(_constraints(item.metadata))
        elif getattr(item, "pattern", None) is not None:  # pydantic's general metadata
            out["pattern"] = item.pattern
        else:
            raise AssertionError(f"a constraint the lean validator does not know: {item!r}")
    return out


def lean_type(annotation: Any, metadata: list[Any] = ()) -> tuple[Any, ...]:  # type: ignore[assignment]
    """The lean spelling of a pydantic field type (see the `loader.lean` docstring)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(annotation)
        return lean_type(base, [*meta, *metadata])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        inner = lean_type(members[0], metadata) if len(members) == 1 else ("or", tuple(lean_type(m) for m in members))
        return ("opt", inner) if len(members) < len(typing.get_args(annotation)) else inner
    if origin is typing.Literal:
        return ("lit", typing.get_args(annotation))
    if origin is list:
        return ("list", lean_type(typing.get_args(annotation)[0]))
    if origin is dict:
        key, value = typing.get_args(annotation)
        return ("dict", lean_type(key), lean_type(value))
    if annotation is typing.Any:
        return ("any",)
    if annotation is bool:
        assert not metadata
        return ("bool",)
    if annotation in (str, int, float):
        return ({str: "str", int: "int", float: "float"}[annotation], _constraints(list(metadata)))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ("model", annotation.__name__)
    raise AssertionError(f"a type the lean validator does not know: {annotation!r}")


def derived(model: type[BaseModel]) -> tuple[Field, ...]:
    fields = []
    for name, info in model.model_fields.items():
        if info.is_required():
            default = REQUIRED
        elif isinstance(info.default, BaseModel):
            assert info.default == type(info.default)(), f"{model.__name__}.{name}: default is not the model's own"
            default = FRESH
        else:
            default = info.default
        fields.append(Field(name, info.alias or name, lean_type(info.annotation, info.metadata), default))
    return tuple(fields)


def _pairs() -> list[tuple[type[BaseModel], Schema]]:
    pairs: list[tuple[type[BaseModel], Schema]] = []
    for schema in config_lean.SCHEMAS.values():
        pairs.append((getattr(config_schema, schema.name), schema))
    for schema in transcript_lean.SCHEMAS.values():
        module = transcript_schema if hasattr(transcript_schema, schema.name) else fence_schema
        pairs.append((getattr(module, schema.name), schema))
    pairs.extend((getattr(tool_args, p.schema.name), p.schema) for p in PARAMETERS.values())
    pairs.extend((getattr(host_params, s.name), s) for s in methods.PARAMS.values())
    return pairs


PAIRS = _pairs()
# The whole document is generated by `_valid_transcript` below (cross checks need related keys).
GENERATED = [(m, s) for m, s in PAIRS if s.name not in ("TranscriptSpec", "AgentScript")]


def test_every_pydantic_model_on_the_run_path_has_a_lean_table():
    modules = (config_schema, transcript_schema, fence_schema, tool_args, host_params)
    models = {
        name for module in modules for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
        and not name.startswith("_")
    }
    assert models == {model.__name__ for model, _ in PAIRS}


@pytest.mark.parametrize(("model", "schema"), PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_the_lean_table_is_derived_from_the_pydantic_model(model, schema):
    assert schema.fields == derived(model)
    config = model.model_config
    assert config.get("extra") == "forbid"  # the lean validator declines every unknown key
    assert config.get("allow_inf_nan", True) is False or "float" not in repr(schema.fields)
    # A model validator is a rule the table cannot express: the schema must carry a hook for it.
    validators = model.__pydantic_decorators__.model_validators.values()
    modes = {v.info.mode for v in validators}
    assert ("before" in modes) == (schema.before is not None)
    assert ("after" in modes) == (schema.after is not None)


def test_the_tool_json_schemas_are_pydantics_byte_for_byte():
    for name, parameters in PARAMETERS.items():
        assert json.dumps(parameters.model_json_schema()) == json.dumps(parameters.model.model_json_schema()), name


# ---- 2. generated inputs: lean accepts only what pydantic accepts, with the same values -------------

_ODD = st.sampled_from([None, True, False, 0, 1, -1, 1.5, "", "x", [], {}, float("inf"), float("nan"), 2**70, "1"])
_WORDS = st.sampled_from(["", "a", "root", "child-1", "x-1", "A", "a b", "https://h.example", "http://h/p",
                          "ftp://h", "DSH_KEY", "1abc", "a\n", "\ud800", "subagent", "report", "wakeup", "quiet",
                          "local", "temporal", "wait", "release", "stop", "tool-calls", "children", "descendants",
                          "continuable", "session-11111111-1111-4111-8111-111111111111"])


def values(kind: tuple[Any, ...], models: dict[str, Schema], depth: int) -> st.SearchStrategy[Any]:
    """Inputs for a field of `kind`: mostly well-typed, near the constraints' edges, sometimes not."""
    tag = kind[0]
    if tag == "str":
        good: st.SearchStrategy[Any] = _WORDS | st.text(max_size=6) | st.text(min_size=79, max_size=81)
    elif tag in ("int", "float"):
        edges = [v + d for v in kind[1].values() if isinstance(v, int | float) for d in (-1, 0, 1)]
        good = st.sampled_from(edges or [0]) | st.integers(-2, 2000)
        if tag == "float":
            good = good | st.floats(allow_nan=True, allow_infinity=True)
    elif tag == "bool":
        good = st.booleans()
    elif tag == "any":
        good = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                            lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
                            max_leaves=4)
    elif tag == "lit":
        good = st.sampled_from(kind[1])
    elif tag == "opt":
        good = st.none() | values(kind[1], models, depth)
    elif tag == "list":
        good = st.lists(values(kind[1], models, depth), max_size=2)
    elif tag == "dict":  # keys well-typed (hashable), values anything
        good = st.dictionaries(values(kind[1], models, 9), values(kind[2], models, depth), max_size=2)
    elif tag == "model":
        good = mappings(models[kind[1]], models, depth + 1) if depth < 2 else st.just({})
    else:
        good = st.one_of(*(values(member, models, depth) for member in kind[1]))
    return st.one_of(good, good, good, _ODD) if depth < 2 else good


_BUILT: dict[tuple[int, int], st.SearchStrategy[Any]] = {}


def mappings(schema: Schema, models: dict[str, Schema], depth: int = 0) -> st.SearchStrategy[Any]:
    """A model's input: any subset of its keys (aliases, now and then the field name instead), and
    now and then an unknown key. Built once per schema and depth."""
    key = (id(schema), depth)
    if key not in _BUILT:
        _BUILT[key] = _mappings(schema, models, depth)
    return _BUILT[key]


def _mappings(schema: Schema, models: dict[str, Schema], depth: int) -> st.SearchStrategy[Any]:
    keys = {f.alias: values(f.type, models, depth) for f in schema.fields}
    base = st.fixed_dictionaries({}, optional=keys)  # type: ignore[arg-type]
    names = {f.name: values(f.type, models, depth) for f in schema.fields if f.name != f.alias}
    odd = st.fixed_dictionaries({}, optional={**names, "unknownKey": st.integers()})  # type: ignore[arg-type]
    return st.one_of(base, base, base, st.tuples(base, odd).map(lambda pair: {**pair[0], **pair[1]}))


def _same(schema: Schema, model: type[BaseModel], data: Any, **kwargs: Any) -> bool:
    """The property: a lean record implies pydantic's acceptance and the same values. True when
    lean accepted (for the callers' coverage counts)."""
    record = validate(schema, data)
    try:
        instance = model.model_validate(data, **kwargs)
    except ValidationError:
        assert record is None, f"lean accepted what pydantic refuses: {data!r}"
        return False
    if record is None:
        return False
    # repr, not ==: `True == 1 == 1.0`, and the types must agree too
    assert repr(record.model_dump()) == repr(instance.model_dump())
    assert repr(record.model_dump(by_alias=True, exclude_none=True)) == repr(instance.model_dump(by_alias=True, exclude_none=True))
    assert record.model_fields_set == instance.model_fields_set
    return True


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize(("model", "schema"), GENERATED, ids=[m.__name__ for m, _ in GENERATED])
@SETTINGS
@given(data=st.data())
def test_generated_inputs_get_the_same_values_or_go_to_pydantic(model, schema, data):
    kwargs: dict[str, Any] = {"by_alias": True, "by_name": False} if schema.name in config_lean.SCHEMAS else {}
    item = data.draw(mappings(schema, schema.models or {schema.name: schema}))
    if _same(schema, model, item, **kwargs) and schema.record is not None and schema.name == "Reply":
        instance = model.model_validate(item)
        record = validate(schema, item)
        assert (record.form, record.finish_reason) == (instance.form, instance.finish_reason)


def _valid_transcript(draw: st.DrawFn) -> dict[str, Any]:
    """A transcript that passes the cross checks most of the time: root spawns children by call id."""
    n = draw(st.integers(0, 3))
    calls = [{"id": f"call-{i}", "name": "subagent",
              "arguments": draw(st.sampled_from([{"prompt": "p", "label": "l"}, '{"prompt":"p","label":"l"}',
                                                 {"prompt": "", "label": "l"}, "not json"]))} for i in range(n)]
    replies = [{"toolCalls": calls}] if calls else []
    replies.append(draw(st.sampled_from([{"text": "done"}, {"text": "x", "finish": "stop"}, {"hang": None},
                                         {"error": {"code": "E", "message": "m", "status": 500}}, {},
                                         {"hang": {"text": "x"}, "text": "y"}])))
    agents: dict[str, Any] = {"root": {"replies": replies}}
    for i in range(n):
        binding = draw(st.sampled_from([{"spawnedBy": f"call-{i}"}, {"order": i + 1}, {"spawnedBy": "nope"}, {}]))
        agents[f"child-{i}"] = {**binding, "replies": [{"text": "{{session:root}} ok"}]}
    doc: dict[str, Any] = {"version": draw(st.sampled_from([1, 1, 1, 2, True])), "name": "gen", "task": "t",
                           "agents": agents}
    if draw(st.booleans()):
        doc["fences"] = [draw(st.sampled_from([
            {"hold": {"agent": "root", "until": {"turnEnded": {"agent": "root", "turn": 1}}}},
            {"hold": {"agent": "*children", "until": {"all": [{"settled": {"agent": "root"}}]}}},
            {"failCheckpoint": {"agent": "nobody"}},
            {"hold": {"agent": "root", "until": {}}},
        ]))]
    return doc


@SETTINGS
@given(data=st.data())
def test_generated_transcripts_get_the_same_spec_or_go_to_pydantic(data):
    doc = data.draw(st.composite(_valid_transcript)())
    if _same(transcript_lean.SCHEMAS["TranscriptSpec"], transcript_schema.TranscriptSpec, doc):
        spec = transcript_lean.lean_spec(doc)
        pyd = transcript_schema.TranscriptSpec.model_validate(doc)
        assert spec.children().keys() == pyd.children().keys()
        assert [(f.kind, f.spec.model_dump()) for f in spec.fences] == [(f.kind, f.spec.model_dump()) for f in pyd.fences]


# ---- 3. shipped files take the lean road, and a lean spec behaves as pydantic's ----------------------


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_transcript_is_lean_and_behaves_as_the_pydantic_one(path):
    lean = load_transcript(path, lean=True)
    pyd = load_transcript(path)

    assert isinstance(lean.spec, Record)  # the fast path applies to what dsh ships
    assert isinstance(pyd.spec, BaseModel)
    assert lean.spec.model_dump() == pyd.spec.model_dump()
    replies = [(r.form, r.finish_reason, r.model_dump()) for s in lean.spec.agents.values() for r in s.replies]
    assert replies == [(r.form, r.finish_reason, r.model_dump()) for s in pyd.spec.agents.values() for r in s.replies]
    assert [(f.kind, f.spec.model_dump()) for f in lean.spec.fences] == [(f.kind, f.spec.model_dump()) for f in pyd.spec.fences]
    assert transcript_problems(lean) == transcript_problems(pyd)


def test_every_shipped_profile_composes_lean_to_the_pydantic_config(tmp_path):
    from dsh.loader.config import compose

    for profile in ("default", "test"):
        lean = compose(profile=profile, environ={}, cwd=tmp_path, lean=True)
        pyd = compose(profile=profile, environ={}, cwd=tmp_path)
        assert isinstance(lean.config, Record) and isinstance(pyd.config, BaseModel)
        assert lean.to_json() == pyd.to_json()
        assert lean.to_yaml() == pyd.to_yaml()


@pytest.mark.parametrize("text", [
    "version: 1\nname: Bad\ntask: t\nagents: {root: {replies: [{text: hi}]}}\n",
    "version: 1\nname: ok\ntask: t\nagents: {root: {replies: [{}]}}\n",
    "version: 1\nname: ok\ntask: t\nagents: {root: {replies: [{text: 1}]}}\n",
    "version: 1\nname: ok\ntask: t\nagents: {child: {order: 1, replies: []}}\n",
], ids=["pattern", "empty-reply", "wrong-type", "no-root"])
def test_an_invalid_transcript_gets_pydantics_error_lines_on_the_lean_road(tmp_path, text):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(TranscriptError) as lean:
        load_transcript(path, lean=True)
    with pytest.raises(TranscriptError) as pyd:
        load_transcript(path)
    assert lean.value.message == pyd.value.message
    assert lean.value.message.startswith(f"{path}:")


def test_a_record_is_frozen_and_compares_by_value():
    spec = transcript_lean.lean_spec({"version": 1, "name": "n", "task": "t", "agents": {"root": {"replies": [{"text": "x"}]}}})
    again = transcript_lean.lean_spec({"version": 1, "name": "n", "task": "t", "agents": {"root": {"replies": [{"text": "x"}]}}})
    assert spec == again and spec is not again
    with pytest.raises(TypeError):
        spec.name = "other"
    assert repr(spec).startswith("TranscriptSpec(version=1, name='n'")
    assert lean_mod.camel("run_in_background") == "runInBackground"


def test_an_unusual_but_valid_transcript_is_validated_by_pydantic_on_the_lean_road(tmp_path):
    """A snake_case key (`tool_calls`, accepted by name) is not lean's to judge: pydantic's spec."""
    path = tmp_path / "t.yaml"
    path.write_text("version: 1\nname: ok\ntask: t\nagents: {root: {replies: [{text: hi, tool_calls: []}]}}\n")

    spec = load_transcript(path, lean=True).spec

    assert isinstance(spec, transcript_schema.TranscriptSpec)
    assert spec.model_dump() == load_transcript(path).spec.model_dump()
