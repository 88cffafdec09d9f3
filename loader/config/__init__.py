"""Configuration (SPEC §14): the schema, its composition from profiles, overlays, transcript overlays
and `DSH_*` variables, and the provenance `dsh config show` prints.

Built once by `headless` or `cli` and passed down as a frozen `Config`; nothing below reads YAML or
`os.environ` for configuration (STYLE §8). The pydantic models are imported on first use of their
names (`__getattr__`), so a `dsh run` that composes with `lean=True` never loads pydantic (issue 13).
"""

from __future__ import annotations

from dsh.loader.config._layers import Layer, deep_merge, flag_layer
from dsh.loader.config.compose import ComposedConfig, compose

TYPE_CHECKING = False
if TYPE_CHECKING:
    from dsh.loader.config._settings import DshEnvironment
    from dsh.loader.config.schema import (
        AgentConfig,
        Config,
        ModelConfig,
        PersistenceConfig,
        RetryConfig,
        RunConfig,
        SubagentsConfig,
        TemporalConfig,
        TestingConfig,
    )

__all__ = [
    "AgentConfig",
    "ComposedConfig",
    "Config",
    "DshEnvironment",
    "Layer",
    "ModelConfig",
    "PersistenceConfig",
    "RetryConfig",
    "RunConfig",
    "SubagentsConfig",
    "TemporalConfig",
    "TestingConfig",
    "compose",
    "deep_merge",
    "flag_layer",
]


_MODELS = frozenset({
    "AgentConfig", "Config", "ModelConfig", "PersistenceConfig", "RetryConfig", "RunConfig", "SubagentsConfig",
    "TemporalConfig", "TestingConfig",
})


def __getattr__(name: str) -> object:
    if name in _MODELS:  # the pydantic models, on first use: `compose(lean=True)` needs none (issue 13)
        from dsh.loader.config import schema

        return getattr(schema, name)
    if name == "DshEnvironment":  # pydantic-settings is imported only when asked for (see _settings)
        from dsh.loader.config._settings import DshEnvironment

        return DshEnvironment
    raise AttributeError(f"module 'dsh.loader.config' has no attribute {name!r}")
