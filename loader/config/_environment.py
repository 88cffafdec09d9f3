"""The environment layer (SPEC §14.2 item 4; issue 16 item 6): `DSH_*` variables read through
pydantic-settings, one `Layer` per variable, so every leaf keeps its variable as provenance.

Rules (README "Environment"):
- Prefix `DSH_`, nested delimiter `__`, names case-insensitive, snake_case field names as segments
  (pydantic-settings also matches the camelCase alias, `DSH_MODEL__BASEURL`); a segment naming a
  section takes a JSON object; the value `null` sets null (`DSH_MODEL__API_KEY_ENV=null`: a keyless
  endpoint; JSON's own null in a section, pydantic-settings' `env_parse_none_str` for a leaf, which
  we apply ourselves since the source's none marker is private). Values stay strings; `compose`
  validates them with their provenance.
- A variable whose first segment names a configuration section (`model`, `agent`, `subagents`,
  `persistence`, `run`, `limits`, `testing`) must name a key: otherwise one problem line (exit 2),
  with a did-you-mean (difflib) when a key is close.
- Every other `DSH_*` variable is ignored. `DSH_HOME`, `DSH_PROFILE` and `DSH_DEBUG` are settings of
  the command itself (`DshEnvironment` declares them; `cli/` reads `DSH_HOME` and `DSH_DEBUG`
  before any of this loads), and a `DSH_FOO__BAR` belongs to someone else: it used to stop every
  command with exit 2.

Why one source call per variable: `EnvSettingsSource` merges all variables into one mapping and so
loses which variable set which leaf, which `dsh config show` prints (§14.2 item 5). The source reads
`os.environ`; `_EnvironSource` reads the mapping `compose` was given instead (tests pass their
own) by overriding `_load_env_vars`, the source's one hook for where variables come from. Both
classes live in `_settings`, imported only when a configuration variable is set: pydantic-settings
(and python-dotenv, argparse and its other sources) is ~6% of a `dsh run`'s start-up (issue 13).

Why a section's JSON is first checked with `loads_bounded`: pydantic-settings decodes it with a bare
`json.loads`, which has no depth bound (`[` × 100,000 is a RecursionError) and accepts `NaN`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from dsh.loader.boundedjson import JsonProblem, loads_bounded
from dsh.loader.config._layers import Layer
from dsh.loader.config.lean import CONFIG, SCHEMAS
from dsh.loader.lean import Field, Schema
from dsh.loader.texts import render

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

__all__ = ["ENV_DELIMITER", "ENV_PREFIX", "env_layers", "env_profile"]

ENV_PREFIX = "DSH_"
ENV_DELIMITER = "__"
NONE_STRING = "null"
_PREFIX = ENV_PREFIX.lower()


SECTIONS = frozenset(f.name for f in CONFIG.fields)  # `Config`'s fields, without importing pydantic


def env_profile(environ: Mapping[str, str]) -> str | None:
    """`DSH_PROFILE`, or None when unset or empty. Names are case-insensitive; when several
    spellings are set, the first in sorted order wins, so the choice does not depend on the order
    of the process environment."""
    for name in sorted(environ):
        if name.lower() == _PREFIX + "profile" and environ[name]:
            from dsh.loader.config._settings import EnvironSource

            value = EnvironSource({name: environ[name]})().get("profile")
            return value if isinstance(value, str) else None
    return None


def env_layers(environ: Mapping[str, str]) -> tuple[list[Layer], list[str]]:
    """One layer per configuration variable, plus one problem line per variable that names no
    key or holds a section value that is not a JSON object. Section-wide variables come first, so
    a nested variable refines them (pydantic-settings' own order)."""
    layers: list[Layer] = []
    problems: list[str] = []
    names = sorted(environ, key=lambda n: (ENV_DELIMITER in n[len(ENV_PREFIX):], n))
    for name in names:
        lowered = name.lower()
        if not lowered.startswith(_PREFIX):
            continue
        segments = lowered[len(_PREFIX):].split(ENV_DELIMITER)
        if segments[0] not in SECTIONS:
            continue  # not a configuration variable (issue 16 item 6)
        raw = environ[name]
        leaf = _lean_leaf(segments)
        if leaf is not None:  # what pydantic-settings gives a scalar leaf: the string (or null)
            layers.append(Layer("env", name, _nested(leaf, None if raw == NONE_STRING else raw)))
            continue
        checked = _check(name, segments, raw)
        if isinstance(checked, str):
            problems.append(checked)
            continue
        path, is_section = checked
        from dsh.loader.config._settings import EnvironSource, SettingsError  # a variable is set
        from dsh.loader.config.schema import Config

        try:
            decoded = EnvironSource({name: raw})()
        except SettingsError as exc:  # the bounded pre-check refuses what json.loads would
            problems.append(f"environment {name}: {'.'.join(path)}: {exc}")
            continue
        values, unknown = _camel_keys(Config, decoded, (), exact_from=len(segments))
        problems.extend(f"environment {name}: {line}" for line in unknown)
        if raw == NONE_STRING and not is_section:  # a section's `null` is JSON already
            values = _nested(path, None)
        layers.append(Layer("env", name, values))
    return layers, problems


def _lean_leaf(segments: list[str]) -> list[str] | None:
    """The camelCase path of a variable that names a scalar leaf, walked through the lean tables;
    None for a section, an unknown segment or a segment past a leaf (pydantic's road, with its
    problem lines). Why: for a scalar leaf pydantic-settings returns the variable's string
    unchanged, yet importing it and the schema cost a short `dsh run` over half its start-up (issue
    13: 0.29 s → 0.50 s for background-settlement with one `DSH_*` variable set on a slow VM).
    `tests/config/test_environment.py` pins that both roads give the same layers."""
    schema: Schema | None = CONFIG
    path: list[str] = []
    for segment in segments:
        if schema is None:
            return None
        found = _lean_field(schema, segment)
        if found is None:
            return None
        path.append(found.alias)
        kind = found.type[1][0] if found.type[0] == "opt" else found.type[0]
        if found.type[0] == "model":
            schema = SCHEMAS[found.type[1]]
        elif kind in _SCALARS:
            schema = None
        else:
            return None
    return path if schema is None else None


_SCALARS = frozenset({"str", "int", "float", "bool", "lit"})


def _lean_field(schema: Schema, key: str) -> Field | None:
    """`_field` over a lean table: a field's name or alias, case-insensitively (`key` is lowercase)."""
    for f in schema.fields:
        if key in (f.name, f.alias) or key in (f.name.lower(), f.alias.lower()):
            return f
    return None


def _nested(path: list[str], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {path[-1]: value}
    for key in reversed(path[:-1]):
        out = {key: out}
    return out


def _check(name: str, segments: list[str], raw: str) -> str | tuple[list[str], bool]:
    """The problem with a configuration variable's name (a segment that names no key), or with
    its section value, which must be a JSON object (or `null`). Without a problem: the key's
    camelCase path and whether it names a section."""
    from dsh.loader.config.schema import Config  # a configuration variable is set: pydantic's turn

    model: type[BaseModel] | None = Config
    path: list[str] = []
    for i, segment in enumerate(segments):
        info = _field(model, segment) if model is not None else None
        if info is None:
            shown = ".".join([*path, *segments[i:]])
            suggestion = _suggest(name, segments, i, model)
            if suggestion is None:
                return f"environment {name}: {shown}: unknown key"
            return f"environment {name}: {shown}: " + render("T-CONFIG-DID-YOU-MEAN", suggestion=suggestion)
        path.append(info[1].alias or info[0])
        model = _section_model(info[1].annotation)
    if model is None or raw == NONE_STRING:
        return path, model is not None
    try:
        decoded = loads_bounded(raw)
    except JsonProblem as exc:
        return f"environment {name}: {'.'.join(path)}: not valid JSON: {exc.msg}"
    if not isinstance(decoded, dict):
        return f"environment {name}: {'.'.join(path)}: expected a JSON object"
    return path, True


def _suggest(name: str, segments: list[str], at: int, model: type[BaseModel] | None) -> str | None:
    """The variable the user probably meant: the closest field name at the unknown segment, or,
    when segments run past a leaf, the leaf's own variable."""
    if model is None:  # `DSH_SUBAGENTS__MAX_DEPTH__X`: segments after a leaf
        return _variable(name, segments[:at])
    close = difflib.get_close_matches(segments[at], list(model.model_fields), n=1, cutoff=0.6)
    if not close:
        return None
    return _variable(name, [*segments[:at], close[0], *segments[at + 1:]])


def _variable(name: str, segments: list[str]) -> str:
    spelled = name[: len(ENV_PREFIX)] + ENV_DELIMITER.join(segments)
    return spelled.upper() if name.isupper() else spelled


def _field(model: type[BaseModel], key: str, *, exact: bool = False) -> tuple[str, FieldInfo] | None:
    """The field `key` names: its name or its camelCase alias (case-insensitively unless `exact`,
    which JSON keys are, as in a YAML file)."""
    for field_name, info in model.model_fields.items():
        spellings = (field_name, info.alias or field_name)
        if key in spellings or (not exact and key in {s.lower() for s in spellings}):
            return field_name, info
    return None


def _section_model(annotation: Any) -> type[BaseModel] | None:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _camel_keys(
    model: type[BaseModel], data: Mapping[str, Any], prefix: tuple[str, ...], *, exact_from: int
) -> tuple[dict[str, Any], list[str]]:
    """Spell decoded keys as YAML does. Keys down to depth `exact_from` came from the variable's
    name (checked already, case-insensitive); deeper ones are a JSON value's and must be spelled as
    in a YAML file. Keys that name no field are dropped and reported, with a did-you-mean."""
    out: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in data.items():
        found = _field(model, key, exact=len(prefix) >= exact_from)
        if found is None:
            path = ".".join([*prefix, key])
            spellings = [info.alias or n for n, info in model.model_fields.items()]
            close = difflib.get_close_matches(key, spellings, n=1, cutoff=0.6)
            unknown.append(f"{path}: " + (render("T-CONFIG-DID-YOU-MEAN", suggestion=close[0]) if close
                                          else "unknown key"))
            continue
        alias = found[1].alias or found[0]
        sub = _section_model(found[1].annotation)
        if sub is not None and isinstance(value, Mapping):
            out[alias], more = _camel_keys(sub, value, (*prefix, alias), exact_from=exact_from)
            unknown.extend(more)
        else:
            out[alias] = value
    return out, unknown
