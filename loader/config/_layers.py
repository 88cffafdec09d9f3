"""Configuration layers and their deep merge with provenance (SPEC §14.2 items 2, 4, 5).

A `Layer` is one source of settings: a YAML file (profile or overlay), one `DSH_*` environment
variable, or the transcript rule that forces `run.parked`. Its `values` use the YAML (camelCase)
spelling, so every layer merges into one tree keyed like the files and pydantic's error `loc` can be
walked back to the layer that set the offending node.

`Merged` folds layers in order. Invariant: `origins[path]` is the layer whose value currently sits
at `path` in `values`, for every node that a layer *replaced* (leaves and replaced subtrees, with
every node inside them); a mapping that later layers merged into keeps the origin of the layer that
created it. Mappings deep-merge; lists, scalars and explicit nulls replace.

The environment's layers are built in `_environment.py` (pydantic-settings); a command-line flag
that overrides a key is a `flag_layer` (kind `flag`, provenance `flag --model`), applied after
the environment.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dsh.loader.errors import ConfigError
from dsh.loader.yamlpos import Loc, YamlDocument, YamlProblem, locate, read_yaml

__all__ = ["Layer", "LayerKind", "Merged", "deep_merge", "file_layer", "flag_layer"]

logger = logging.getLogger(__name__)

LayerKind = Literal["file", "env", "flag", "transcript"]
NodePath = tuple[str | int, ...]  # YAML keys are str, but a file may hold other scalar keys


@dataclass(frozen=True)
class Layer:
    """One source of settings. `label` is how people see it: a display path such as
    `profiles/test.yaml`, an environment variable name, a flag (`--model`), or `transcript`."""

    kind: LayerKind
    label: str
    values: dict[str, Any]
    document: YamlDocument | None = None  # a file layer's parse, whose marked tree locates keys
    path: Path | None = None

    @property
    def marked(self) -> Any:
        """The ruamel tree of a file layer (composed on first use: errors and provenance only)."""
        if self.document is None:
            return None
        try:
            return self.document.marked()
        except YamlProblem as exc:  # a fast parse accepted what the marked loader refuses
            raise ConfigError(exc.render(self.label)) from exc

    def where(self, loc: Loc) -> str:
        """The prefix of an error at `loc`: `<file>:<line>:<col>` or `environment DSH_…`."""
        if self.kind == "file":
            line, col = locate(self.marked, loc)
            return f"{self.label}:{line}:{col}"
        if self.kind == "env":
            return f"environment {self.label}"
        if self.kind == "flag":
            return f"flag {self.label}"
        return self.label

    def source(self, loc: Loc) -> str:
        """The provenance of a leaf at `loc`: `<file>:<line>`, `env DSH_…` or `transcript`."""
        if self.kind == "file":
            return f"{self.label}:{locate(self.marked, loc)[0]}"
        if self.kind == "env":
            return f"env {self.label}"
        if self.kind == "flag":
            return f"flag {self.label}"
        return self.label


def flag_layer(option: str, key: str, value: Any) -> Layer:
    """A command-line flag that overrides one key: `flag_layer("--model", "model.model", "x")`.
    `key` is the dotted YAML (camelCase) path; provenance reads `flag --model`, and a bad value
    is reported as `flag --model: model.model: <problem>` (exit 2). Pass these to `compose(flags=…)`,
    in argv order; they apply after the environment."""
    values: dict[str, Any] = {}
    node = values
    *parents, leaf = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return Layer("flag", option, values)


def file_layer(path: Path, label: str) -> Layer:
    """Read one profile or overlay. Malformed YAML and non-mapping documents raise at once, since
    nothing in such a file can be merged; an empty file is an empty mapping."""
    try:
        document = read_yaml(path)  # fast where that is safe; the marked tree only when asked for
    except YamlProblem as exc:
        raise ConfigError(exc.render(label)) from exc
    layer = Layer("file", label, {}, document=document, path=path)
    if document.data is None:
        return layer
    if not isinstance(document.data, dict):
        line, col = locate(layer.marked, ())
        raise ConfigError(f"{label}:{line}:{col}: a configuration file must be a YAML mapping")
    return Layer("file", label, document.data, document=document, path=path)


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
