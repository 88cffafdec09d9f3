"""`loader.config` public surface: widening it should be a visible decision (STYLE §2)."""

from __future__ import annotations

import dsh.loader.config

from dsh import loader


def test_config_exports_exactly_the_pinned_names() -> None:
    assert sorted(loader.config.__all__) == sorted(
        [
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
    )
    assert all(hasattr(loader.config, name) for name in loader.config.__all__)
