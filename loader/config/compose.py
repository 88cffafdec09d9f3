"""Composing the configuration from its layers (SPEC §14.2, §17.2, §19).

Order, later layers winning: schema defaults → profile → transcript overlays (listed order, relative
to the transcript's directory) → `--overlay` files (argv order, relative to the cwd) → environment
(`DSH_*`, through pydantic-settings: `_environment.py`) → under a transcript, `run.parked: release`
(§17.2: nobody is there to resume parked work, so it is forced and shown with source `transcript`) →
command-line flags (`flags`, each a `flag_layer`: `--model` sets `model.model`, shown with source
`flag --model`; an explicit `--parked wait` beats the transcript's rule, for a person who means to
`dsh send` to a replay's parked child).

Profile choice: the `profile` argument, else `DSH_PROFILE`, else `test` when a transcript is given
(so `dsh run --transcript NAME` needs no key), else `default`.

Fence gating (§14.2 item 6): `testing.*` keys are accepted only when the base profile is the shipped
`test` profile file; then any later layer may override them. `fences_allowed` is true for that
profile or when the pytest plugin composes (it always uses the test profile).

Every problem a person can fix is one line of a single `ConfigError` (exit 2):
`<file>:<line>:<col>: <key.path>: <problem>` or `environment DSH_…: <key.path>: <problem>`; key
paths use the YAML spelling (`subagents.reportDelivery`). Malformed YAML and unknown names stop at
the first problem, since nothing after them can be merged.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dsh.loader.config._environment import env_layers, env_profile
from dsh.loader.config._layers import Layer, Merged, file_layer
from dsh.loader.config._render import DEFAULT_SOURCE, render_yaml
from dsh.loader.errors import ConfigError
from dsh.loader.problems import in_position_order, unknown_key_problem
from dsh.loader.shipped import ShippedKind, resolve_name, shipped_dir
from dsh.loader.yamlpos import Loc

if TYPE_CHECKING:
    from pydantic import ValidationError

    from dsh.loader.config.schema import Config
    from dsh.loader.transcripts import Transcript

__all__ = ["ComposedConfig", "compose"]

logger = logging.getLogger(__name__)

# Our wording (§14.2 item 6, §22).
TESTING_GATED = "allowed only on top of the shipped test profile"
EMPTY_PROFILE = "--profile: give a profile name or path, not an empty string"
TRANSCRIPT_SOURCE = "transcript"
_PROBLEM_TEXT = {"extra_forbidden": "unknown key", "missing": "required key is missing"}
_SHIPPED_KINDS: tuple[ShippedKind, ...] = ("profiles", "overlays", "transcripts")


@dataclass(frozen=True)
class ComposedConfig:
    """A validated `Config` and where each of its leaves came from.

    `provenance` has one entry per leaf of `config`, keyed by the dotted YAML path
    (`subagents.reportDelivery`), valued `default`, `<file>:<line>`, `env DSH_…` or `transcript`.
    `layers` lists the files applied, profile first.
    """

    config: Config
    # The provenance, computed on first use (`dsh config show`, tests): a file layer's lines come from
    # its marked tree, which a run that reports no error never needs (ruamel stays unloaded, issue 13).
    sources: Callable[[], dict[str, str]] = field(repr=False, compare=False)
    profile_path: Path
    layers: list[Path] = field(default_factory=list)
    fences_allowed: bool = False

    @functools.cached_property
    def provenance(self) -> dict[str, str]:
        return self.sources()

    def to_yaml(self) -> str:
        """`dsh config show`: block YAML, camelCase keys, `# <source>` on every leaf."""
        return render_yaml(self._values(), self.provenance)

    def to_json(self) -> dict[str, Any]:
        """`dsh config show --json`: the values, their provenance and the files applied."""
        return {
            "config": self._values(),
            "provenance": dict(self.provenance),
            "profile": str(self.profile_path),
            "layers": [str(p) for p in self.layers],
            "fencesAllowed": self.fences_allowed,
        }

    def _values(self) -> dict[str, Any]:
        return self.config.model_dump(mode="json", by_alias=True)


def compose(
    *,
    profile: str | None = None,
    overlays: Sequence[str] = (),
    transcript: Transcript | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    pytest_plugin: bool = False,
    flags: Sequence[Layer] = (),
    lean: bool = False,
) -> ComposedConfig:
    """Build the configuration of one run. `environ` defaults to `os.environ` and `cwd` to the
    process cwd; tests pass both so they never touch process state. `flags` are the command-line
    overrides (`flag_layer("--model", "model.model", value)`), in argv order. `lean`: validate
    without pydantic where `loader.config.lean` is sure (issue 13; `dsh run` does), so `config` may
    be a lean record of the same values; anything else is validated, and reported, by pydantic."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    base = Path.cwd() if cwd is None else cwd

    profile_path = resolve_name("profiles", _profile_name(profile, env, transcript), relative_to=base)
    files = [file_layer(profile_path, _display(profile_path, base))]
    if transcript is not None:
        for value in transcript.spec.overlays:
            path = resolve_name("overlays", value, relative_to=transcript.path.parent)
            files.append(file_layer(path, _display(path, base)))
    for value in overlays:
        path = resolve_name("overlays", value, relative_to=base)
        files.append(file_layer(path, _display(path, base)))
    env_config, problems = env_layers(env)

    layers = [*files, *env_config]
    on_test_profile = _is_shipped_test_profile(profile_path)
    if not on_test_profile:
        problems = [*_gated_testing_keys(layers), *problems]
        layers = [_without_testing(layer) for layer in layers]
    if transcript is not None:
        layers.append(Layer("transcript", TRANSCRIPT_SOURCE, {"run": {"parked": "release"}}))
    # Flags come last: an explicit `--parked wait` outranks the transcript's default too.
    layers.extend(flags)

    merged = Merged()
    for layer in layers:
        merged.apply(layer)
    config: Config | None = None
    if lean:
        from dsh.loader.config.lean import lean_config

        strings = [path for path, layer in merged.origins.items() if layer.kind == "env"]
        config = lean_config(merged.values, strings)
    if config is None:
        from pydantic import ValidationError

        from dsh.loader.config.schema import Config

        try:
            config = Config.model_validate(merged.values, by_alias=True, by_name=False)
        except ValidationError as exc:
            problems.extend(_validation_problems(exc, merged))
    if problems or config is None:
        raise ConfigError("\n".join(in_position_order(problems)))

    logger.debug("composed config from %s", [layer.label for layer in layers])
    return ComposedConfig(
        config=config,
        sources=functools.partial(_provenance, config, merged),
        profile_path=profile_path,
        layers=[layer.path for layer in files if layer.path is not None],
        fences_allowed=on_test_profile or pytest_plugin,
    )


def _profile_name(profile: str | None, environ: Mapping[str, str], transcript: Transcript | None) -> str:
    if profile is not None and not profile.strip():
        # Issue 15 item 7: `--profile ""` used to mean "the default profile" without saying so.
        raise ConfigError(EMPTY_PROFILE)
    if profile:
        return profile
    from_env = env_profile(environ)
    if from_env:
        return from_env
    return "test" if transcript is not None else "default"


def _is_shipped_test_profile(path: Path) -> bool:
    return path.resolve() == (shipped_dir("profiles") / "test.yaml").resolve()


def _display(path: Path, cwd: Path) -> str:
    """Shipped files read as `profiles/test.yaml`; others relative to the cwd when inside it."""
    resolved = path.resolve()
    for kind in _SHIPPED_KINDS:
        try:
            directory = shipped_dir(kind).resolve()
        except ConfigError:
            continue
        if resolved.parent == directory:
            return f"{kind}/{path.name}"
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def _gated_testing_keys(layers: list[Layer]) -> list[str]:
    problems: list[str] = []
    for layer in layers:
        if "testing" not in layer.values:
            continue
        section = layer.values["testing"]
        keys: list[Loc] = (
            [("testing", key) for key in section] if isinstance(section, dict) and section else [("testing",)]
        )
        for loc in keys:
            problems.append(f"{layer.where(loc)}: {'.'.join(map(str, loc))}: {TESTING_GATED}")
    return problems


def _without_testing(layer: Layer) -> Layer:
    if "testing" not in layer.values:
        return layer
    return replace(layer, values={k: v for k, v in layer.values.items() if k != "testing"})


def _validation_problems(exc: ValidationError, merged: Merged) -> list[str]:
    from dsh.loader.config.schema import Config

    problems: list[str] = []
    for err in exc.errors():
        loc: Loc = tuple(err["loc"])
        problem = _PROBLEM_TEXT.get(err["type"], err["msg"])
        if err["type"] == "extra_forbidden":
            problem = unknown_key_problem(Config, loc)
        cause = (err.get("ctx") or {}).get("error")
        if err["type"] == "value_error" and cause is not None:
            problem = str(cause)  # drop pydantic's "Value error, " prefix
        layer, _ = merged.origin(loc)
        where = layer.where(loc) if layer is not None else DEFAULT_SOURCE
        line = f"{where}: {_key_path(merged.values, loc)}: {problem}"
        if line not in problems:
            problems.append(line)
    return problems


def _key_path(values: Mapping[str, Any], loc: Loc) -> str:
    """`loc` as `a.b.c`, keeping the parts that name data (pydantic may append type tags)."""
    parts: list[str] = []
    node: Any = values
    for part in loc:
        if not isinstance(node, Mapping) or part not in node:
            if isinstance(node, Mapping) and isinstance(part, str):
                parts.append(part)  # a missing key is still named
            break
        parts.append(str(part))
        node = node[part]
    return ".".join(parts)


def _provenance(config: Config, merged: Merged) -> dict[str, str]:
    out: dict[str, str] = {}

    def walk(node: Mapping[str, Any], prefix: tuple[str, ...]) -> None:
        for key, value in node.items():
            path = (*prefix, key)
            if isinstance(value, Mapping):
                walk(value, path)
                continue
            layer = merged.origins.get(path)
            out[".".join(path)] = layer.source(path) if layer is not None else DEFAULT_SOURCE

    walk(config.model_dump(by_alias=True), ())
    return out
