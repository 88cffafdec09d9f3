"""pydantic-settings' half of the environment layer (`_environment`'s docstring has the rules):
`DshEnvironment` declares every variable, `EnvironSource` decodes one variable the way
pydantic-settings does. Imported only when a `DSH_*` configuration variable (or `DSH_PROFILE`) is
set, since importing pydantic-settings costs a short `dsh run` several percent (issue 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, SettingsError

from dsh.loader.config._environment import ENV_DELIMITER, ENV_PREFIX
from dsh.loader.config.schema import (
    AgentConfig,
    LimitsConfig,
    ModelConfig,
    PersistenceConfig,
    RunConfig,
    SubagentsConfig,
    TemporalConfig,
    TestingConfig,
)

__all__ = ["DshEnvironment", "EnvironSource", "SettingsError"]


class DshEnvironment(BaseSettings):
    """Every variable dsh reads, as pydantic-settings decodes them. Never instantiated: `compose`
    validates the decoded values layer by layer, so errors name the variable."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_DELIMITER, case_sensitive=False, extra="ignore",
    )

    home: str | None = None  # DSH_HOME: the storage root (default ~/.dsh); read by cli/common.py
    profile: str | None = None  # DSH_PROFILE: the profile when --profile is not given
    debug: str | None = None  # DSH_DEBUG=1: print an internal error's traceback; read by cli/main.py
    # One field per configuration section; tests pin that these are exactly `Config`'s sections.
    model: ModelConfig = ModelConfig()
    agent: AgentConfig = AgentConfig()
    subagents: SubagentsConfig = SubagentsConfig()
    persistence: PersistenceConfig = PersistenceConfig()
    run: RunConfig = RunConfig()
    limits: LimitsConfig = LimitsConfig()
    testing: TestingConfig = TestingConfig()
    engine: Literal["local", "temporal"] = "local"  # DSH_ENGINE
    temporal: TemporalConfig = TemporalConfig()


class EnvironSource(EnvSettingsSource):
    """`EnvSettingsSource` over a given mapping instead of `os.environ`."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(DshEnvironment)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # What the base loader does with os.environ (case_sensitive is False): names lowercased.
        return {name.lower(): value for name, value in self._environ.items()}
