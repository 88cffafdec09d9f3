"""Configuration layers and their deep merge with provenance (SPEC §14.2 items 2, 4, 5).

A `Layer` is one source of settings: a YAML file (profile or overlay), one `DSH_*` environment
variable, or the transcript rule that forces `run.parked`. Its `values` use the YAML (camelCase)
spelling, so every layer merges into one tree keyed like the files and pydantic's error `loc` can be
walked back to the layer that set the offending node.

`Merged` folds layers in order. Invariant: `origins[path]` is the layer whose value currently sits
at `path` in `values`, for every node that a layer *replaced* (leaves and replaced subtrees, with
every node inside them); a mapping that later layers merged into keeps the origin of the layer that
created it. Mappings deep-merge; lists, scalars and explicit nulls replace.

Environment decision: we parse the `environ` mapping ourselves instead of using pydantic-settings'
`EnvSettingsSource`. The semantics are the same (prefix `DSH_`, nested delimiter `__`,
case-insensitive names, snake_case field names as segments, a segment naming a section takes a
JSON object, values stay strings for pydantic's lax coercion), but `EnvSettingsSource` reads
`os.environ` and silently drops variables that name no key, while §14.2 item 4 makes those errors
and item 5 needs the variable name of every leaf for provenance.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from loader.boundedjson import JsonProblem, loads_bounded
from loader.config.schema import Config
from loader.errors import ConfigError
from loader.yamlpos import Loc, YamlProblem, load_yaml_with_marks, locate, plain

__all__ = ["Layer", "LayerKind", "Merged", "deep_merge", "env_layers", "file_layer"]

logger = logging.getLogger(__name__)

LayerKind = Literal["file", "env", "flag", "transcript"]  # a flag's label is `flag --model`
NodePath = tuple[str | int, ...]  # YAML keys are str, but a file may hold other scalar keys

ENV_PREFIX = "dsh_"
ENV_DELIMITER = "__"
# Top-level settings that share the prefix but are not config keys (§14.2 item 4).
ENV_SETTINGS = frozenset({"dsh_home", "dsh_profile"})


@dataclass(frozen=True)
class Layer:
    """One source of settings. `label` is how people see it: a display path such as
    `profiles/test.yaml`, an environment variable name, or `transcript`."""

    kind: LayerKind
    label: str
    values: dict[str, Any]
    marked: Any = None  # the ruamel tree of a file layer, kept only to locate keys
    path: Path | None = None

    def where(self, loc: Loc) -> str:
        """The prefix of an error at `loc`: `<file>:<line>:<col>` or `environment DSH_…`."""
        if self.kind == "file":
            line, col = locate(self.marked, loc)
            return f"{self.label}:{line}:{col}"
        if self.kind == "env":
            return f"environment {self.label}"
        return self.label

    def source(self, loc: Loc) -> str:
        """The provenance of a leaf at `loc`: `<file>:<line>`, `env DSH_…` or `transcript`."""
        if self.kind == "file":
            return f"{self.label}:{locate(self.marked, loc)[0]}"
        if self.kind == "env":
            return f"env {self.label}"
        return self.label


def file_layer(path: Path, label: str) -> Layer:
    """Read one profile or overlay. Malformed YAML and non-mapping documents raise at once, since
    nothing in such a file can be merged; an empty file is an empty mapping."""
    try:
        marked = load_yaml_with_marks(path)
    except YamlProblem as exc:
        raise ConfigError(exc.render(label)) from exc
    if marked is None:
        return Layer("file", label, {}, marked=None, path=path)
    if not isinstance(marked, dict):
        line, col = locate(marked, ())
        raise ConfigError(f"{label}:{line}:{col}: a configuration file must be a YAML mapping")
    return Layer("file", label, plain(marked), marked=marked, path=path)


def env_layers(environ: Mapping[str, str]) -> tuple[list[Layer], list[str]]:
    """One layer per config variable, in name order, plus one problem line per variable that
    names no key or holds a section value that is not a JSON object.

    A variable without `__` that names no section (e.g. `DSH_VERBOSE`) is ignored, as
    pydantic-settings ignores unrelated variables; `DSH_HOME` and `DSH_PROFILE` are settings of
    their own and never reach here as config.
    """
    layers: list[Layer] = []
    problems: list[str] = []
    # Section-wide JSON values first, so a nested variable refines them (pydantic-settings order).
    names = sorted(environ, key=lambda n: (ENV_DELIMITER in n[len(ENV_PREFIX) :], n))
    for name in names:
        lowered = name.lower()
        if not lowered.startswith(ENV_PREFIX) or lowered in ENV_SETTINGS:
            continue
        segments = lowered[len(ENV_PREFIX) :].split(ENV_DELIMITER)
        nested = len(segments) > 1
        try:
            path, model = _resolve_env_path(segments)
        except _UnknownKey as exc:
            if nested:
                problems.append(f"environment {name}: {exc.path}: unknown key")
            continue
        raw = environ[name]
        if model is None:
            value: Any = raw
        else:
            try:
                decoded = loads_bounded(raw)
            except JsonProblem as exc:
                problems.append(f"environment {name}: {'.'.join(path)}: not valid JSON: {exc.msg}")
                continue
            if not isinstance(decoded, dict):
                problems.append(f"environment {name}: {'.'.join(path)}: expected a JSON object")
                continue
            value = _camel_keys(model, decoded)
        values: dict[str, Any] = value
        for key in reversed(path):
            values = {key: values}
        layers.append(Layer("env", name, values))
    return layers, problems


class _UnknownKey(Exception):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def _resolve_env_path(segments: list[str]) -> tuple[tuple[str, ...], type[BaseModel] | None]:
    """Walk snake_case segments through the schema. Returns the camelCase path and, when the path
    names a section rather than a leaf, that section's model (its value is then JSON)."""
    model: type[BaseModel] | None = Config
    path: list[str] = []
    for i, segment in enumerate(segments):
        info = model.model_fields.get(segment) if model is not None else None
        if info is None or not segment:
            raise _UnknownKey(".".join([*path, *segments[i:]]))
        path.append(info.alias or segment)
        model = _section_model(info.annotation)
    return tuple(path), model


def _section_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _camel_keys(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Spell JSON keys as YAML does; snake_case field names are accepted as in pydantic-settings,
    anything else is kept so validation reports it as an unknown key."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        info = model.model_fields.get(key)
        alias = info.alias if info is not None and info.alias else key
        if info is None:
            for name, candidate in model.model_fields.items():
                if candidate.alias == key:
                    info, alias = model.model_fields[name], key
                    break
        sub = _section_model(info.annotation) if info is not None else None
        out[alias] = _camel_keys(sub, value) if sub is not None and isinstance(value, dict) else value
    return out


def deep_merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` on top of `base` (§14.2 item 2): mappings merge key by key, lists and scalars
    (including an explicit None) replace. Neither input is modified."""
    out = {key: _copy(value) for key, value in base.items()}
    for key, value in overlay.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


@dataclass
class Merged:
    """The running result of folding layers, with the origin of every replaced node."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[NodePath, Layer] = field(default_factory=dict)

    def apply(self, layer: Layer) -> None:
        self._apply(self.values, layer.values, (), layer)
        logger.debug("applied config layer %s", layer.label)

    def _apply(self, target: dict[str, Any], values: Mapping[str, Any], prefix: NodePath, layer: Layer) -> None:
        for key, value in values.items():
            path = (*prefix, key)
            if isinstance(value, Mapping) and isinstance(target.get(key), dict):
                self._apply(target[key], value, path, layer)
                continue
            target[key] = _copy(value)
            for stale in [p for p in self.origins if p[: len(path)] == path]:
                del self.origins[stale]
            self._claim(path, value, layer)

    def _claim(self, path: NodePath, value: Any, layer: Layer) -> None:
        self.origins[path] = layer
        if isinstance(value, Mapping):
            for key, sub in value.items():
                self._claim((*path, key), sub, layer)

    def origin(self, loc: Loc) -> tuple[Layer | None, Loc]:
        """The layer behind the deepest node of `loc` that some layer set, and that node's loc."""
        for end in range(len(loc), 0, -1):
            layer = self.origins.get(tuple(loc[:end]))
            if layer is not None:
                return layer, tuple(loc[:end])
        return None, ()
