"""Shipped endpoint overlays and keyless runs (issue 16 item 4), through the CLI.

`dsh run` runs in-process against respx routes (the suite's autouse mock), so the test sees the
exact request the real provider sent; no variable names a key unless the test sets one.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from test_config_cmd import leaves

from sse_kit import SSE_HEADERS, delta, finish, sse

README = Path(__file__).resolve().parents[2] / "README.md"
NO_KEYS = {"DEEPSEEK_API_KEY": None, "OPENAI_API_KEY": None, "VLLM_API_KEY": None}


@pytest.mark.parametrize(("overlay", "base_url", "model", "key_env", "line"), [
    pytest.param("openai", "https://api.openai.com/v1", "gpt-4o-mini", "OPENAI_API_KEY", 2, id="openai"),
    pytest.param("ollama", "http://localhost:11434/v1", "llama3.2", "null", 2, id="ollama"),
    pytest.param("vllm", "http://localhost:8000/v1", "Qwen/Qwen2.5-1.5B-Instruct", "null", 3, id="vllm"),
])
def test_shipped_endpoint_overlays_set_base_url_model_and_key_variable(dsh, overlay, base_url, model, key_env, line):
    shown = dsh("config", "show", "--overlay", overlay)

    assert (shown.exit_code, shown.stderr) == (0, "")
    got = leaves(shown.stdout)
    source = f"overlays/{overlay}.yaml:{line}"
    assert got["model.baseUrl"] == (base_url, source)
    assert got["model.model"] == (model, source)
    assert got["model.apiKeyEnv"] == (key_env, source)


@pytest.mark.parametrize("overlay", ["openai", "ollama", "vllm"])
def test_the_readme_has_a_recipe_for_each_endpoint_overlay(overlay):
    assert f"dsh run --overlay {overlay} " in README.read_text()


def test_a_keyless_run_needs_no_variable_and_sends_no_authorization(dsh, home, llm):
    """`--overlay ollama` with no key variable set: the run completes and the request carries no
    Authorization header, only the model the overlay names."""
    body = sse(delta(content="four"), finish("stop"), "[DONE]")
    route = llm.post("http://localhost:11434/v1/chat/completions").mock(
        return_value=httpx.Response(200, headers=SSE_HEADERS, content=body))

    result = dsh("run", "two plus two?", "--overlay", "ollama", "--home", home, env=NO_KEYS)

    assert (result.exit_code, result.stdout, result.stderr) == (0, "four\n", "")
    sent = route.calls.last.request
    assert "authorization" not in sent.headers
    assert json.loads(sent.content)["model"] == "llama3.2"


def test_the_openai_overlay_without_its_key_names_the_variable(dsh, home):
    result = dsh("run", "a task", "--overlay", "openai", "--home", home, env=NO_KEYS)

    assert (result.exit_code, result.stdout) == (2, "")
    assert "OPENAI_API_KEY" in result.stderr and result.stderr.count("\n") == 1



def test_a_keyless_endpoint_through_the_environment_alone(dsh, home, llm):
    """`DSH_MODEL__API_KEY_ENV=null` (pydantic-settings' none string) makes the default profile
    keyless; the key variable of the default profile is then not needed."""
    route = llm.post("http://127.0.0.1:9/v1/chat/completions").mock(
        return_value=httpx.Response(200, headers=SSE_HEADERS, content=sse(delta(content="ok"), finish("stop"))))

    result = dsh("run", "hi", "--home", home, env={**NO_KEYS, "DSH_MODEL__API_KEY_ENV": "null",
                                                    "DSH_MODEL__BASE_URL": "http://127.0.0.1:9/v1"})

    assert (result.exit_code, result.stdout) == (0, "ok\n"), result.stderr
    assert "authorization" not in route.calls.last.request.headers
