"""Which configuration key each command-line flag overrides (issue 16), and the flag layers.

Stdlib only at module level: `dsh run` answered by `cli.fastpath` builds its flag layers here
without typer. The Typer declarations of these flags live in `cli.flags`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dsh.loader.config import Layer

__all__ = ["FLAG_KEYS", "config_flags"]

# flag -> the dotted YAML key it overrides
FLAG_KEYS: dict[str, str] = {
    "--model": "model.model",
    "--append-system-prompt": "agent.appendSystemPrompt",
    "--max-steps": "agent.maxStepsPerTurn",
    "--parked": "run.parked",
    "--max-children": "limits.maxChildren",
    "--max-requests": "limits.maxRequests",
    "--max-tokens": "limits.maxTokens",
    "--engine": "engine",
}


def config_flags(
    *,
    model: str | None = None,
    append_system_prompt: str | None = None,
    max_steps: int | None = None,
    parked: str | None = None,
    max_children: int | None = None,
    max_requests: int | None = None,
    max_tokens: int | None = None,
    engine: str | None = None,
) -> list[Layer]:
    """One `flag_layer` per flag given, for `compose(flags=…)`, in a fixed order."""
    from dsh.loader.config import flag_layer  # config (pydantic) only once a command composes one
    given: dict[str, object | None] = {
        "--model": model,
        "--append-system-prompt": append_system_prompt,
        "--max-steps": max_steps,
        "--parked": parked,
        "--max-children": max_children,
        "--max-requests": max_requests,
        "--max-tokens": max_tokens,
        "--engine": engine,
    }
    return [flag_layer(flag, FLAG_KEYS[flag], value) for flag, value in given.items() if value is not None]
