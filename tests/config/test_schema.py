"""The configuration schema (SPEC §14.1): defaults, camelCase keys, constraints in the types."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from dsh.loader.config import Config, SubagentsConfig
from dsh.loader.texts import TEXTS


def test_defaults_match_the_spec_table() -> None:
    config = Config()
    assert config.model.provider == "openai-compatible"
    assert config.model.base_url == "https://api.deepseek.com"
    assert config.model.model == "deepseek-chat"
    assert config.model.api_key_env == "DEEPSEEK_API_KEY"
    assert config.model.max_tokens is None and config.model.temperature is None
    assert (config.model.connect_timeout_seconds, config.model.read_timeout_seconds) == (10, 120)
    assert config.model.retry.model_dump() == {
        "max_attempts": 4,
        "initial_backoff_seconds": 1.0,
        "max_backoff_seconds": 30.0,
    }
    assert config.agent.system_prompt == TEXTS["T-SYSTEM-DEFAULT"]
    assert (config.agent.max_parallel_tool_calls, config.agent.max_steps_per_turn) == (10, 100)
    assert (config.subagents.report_delivery, config.subagents.max_depth) == ("wakeup", 3)
    assert (config.persistence.batch_delay_ms, config.persistence.fsync) == (200, True)
    assert (config.run.shutdown_grace_seconds, config.run.parked) == (5, "wait")
    assert (config.testing.fences, config.testing.fence_timeout_seconds) == (False, 10)


def test_yaml_keys_are_camel_case_and_python_names_still_work() -> None:
    assert Config.model_validate({"subagents": {"reportDelivery": "quiet"}}).subagents.report_delivery == "quiet"
    assert SubagentsConfig(report_delivery="quiet").report_delivery == "quiet"
    assert "reportDelivery" in Config().model_dump(by_alias=True)["subagents"]


def test_config_is_frozen() -> None:
    config = Config()
    with pytest.raises(ValidationError):
        setattr(config.subagents, "max_depth", 5)  # noqa: B010 (assignment mypy would reject)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"model": {"provider": "anthropic"}}, id="provider"),
        pytest.param({"model": {"baseUrl": "api.deepseek.com"}}, id="base-url-scheme"),
        pytest.param({"model": {"apiKeyEnv": "NOT A NAME"}}, id="api-key-env"),
        pytest.param({"model": {"maxTokens": 0}}, id="max-tokens"),
        pytest.param({"model": {"temperature": 2.5}}, id="temperature"),
        pytest.param({"model": {"readTimeoutSeconds": 0}}, id="read-timeout"),
        pytest.param({"model": {"retry": {"maxAttempts": 11}}}, id="max-attempts"),
        pytest.param({"agent": {"maxParallelToolCalls": 65}}, id="parallel"),
        pytest.param({"agent": {"maxStepsPerTurn": 0}}, id="steps"),
        pytest.param({"subagents": {"reportDelivery": "next-step"}}, id="m83-report-delivery"),
        pytest.param({"subagents": {"maxDepth": 17}}, id="max-depth"),
        pytest.param({"persistence": {"batchDelayMs": 5001}}, id="batch-delay"),
        pytest.param({"run": {"shutdownGraceSeconds": -1}}, id="grace"),
        pytest.param({"run": {"parked": "drop"}}, id="parked"),
        pytest.param({"model": {"unknown": 1}}, id="unknown-key"),
    ],
)
def test_out_of_range_values_are_rejected(data: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Config.model_validate(data)


def test_max_depth_zero_is_valid() -> None:
    assert Config.model_validate({"subagents": {"maxDepth": 0}}).subagents.max_depth == 0
