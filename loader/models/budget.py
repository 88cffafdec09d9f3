"""Run-wide budgets (issue 15 finding 9): children spawned, model requests and tokens per run.

Depth and steps per turn cap one branch; a model that answers every notice by spawning again is
capped by nothing else. One `RunBudget` is shared by a whole tree (`Tree.budget`):

- spawns: the `subagent` tool calls `take_child()` before it asks the manager, so an exhausted
  budget is a tool error result `BUDGET_EXHAUSTED` the model sees, and no child is created;
- requests and tokens: `BudgetedProvider` (wrapped around each agent's provider by the tree) calls
  `take_request()` before every model request, so the step fails with `ProviderError`
  `BUDGET_EXHAUSTED` and the turn ends `error`; tokens are counted from each stream's `Usage`.

A request already in flight finishes (tokens may overshoot by one reply); the first exhausted
kind is kept for the result record. Counting is plain attribute arithmetic on the loop thread, so
check and count are one sync span.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal

from dsh.loader.abort import AbortSignal
from dsh.loader.errors import ProviderError, ToolError
from dsh.loader.models.protocol import Chunk, ModelProvider, ModelRequest, OnRetry, Usage
from dsh.loader.texts import render

__all__ = ["DEFAULT_LIMITS", "BudgetKind", "BudgetedProvider", "RunBudget", "RunLimits"]

BudgetKind = Literal["children", "requests", "tokens"]


@dataclass(frozen=True)
class RunLimits:
    """Per-run caps; the defaults are documented in README ("Run budgets")."""

    max_children: int = 200
    max_requests: int = 2_000
    max_tokens: int = 2_000_000


DEFAULT_LIMITS = RunLimits()


class RunBudget:
    """What one run has used, against `limits`."""

    def __init__(self, limits: RunLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.children = 0
        self.requests = 0
        self.tokens = 0
        self.exhausted: BudgetKind | None = None

    def take_child(self) -> None:
        """Count one spawn, or raise the tool error the model sees."""
        # --- S-budget-child begin --- (no await: check and count together)
        if self.children >= self.limits.max_children:
            self._exhaust("children")
            raise ToolError("BUDGET_EXHAUSTED", self._message("children", self.limits.max_children))
        self.children += 1
        # --- S-budget-child end ---

    def take_request(self) -> None:
        """Count one model request, or raise the provider error that ends the turn."""
        # --- S-budget-request begin ---
        if self.tokens >= self.limits.max_tokens:
            self._exhaust("tokens")
            raise ProviderError("BUDGET_EXHAUSTED", self._message("tokens", self.limits.max_tokens))
        if self.requests >= self.limits.max_requests:
            self._exhaust("requests")
            raise ProviderError("BUDGET_EXHAUSTED", self._message("requests", self.limits.max_requests))
        self.requests += 1
        # --- S-budget-request end ---

    def add_usage(self, usage: Usage) -> None:
        self.tokens += usage.input_tokens + usage.output_tokens

    def summary(self) -> dict[str, Any]:
        """The `budget` member of the `--json` result record."""
        return {
            "exhausted": self.exhausted,
            "children": self.children, "maxChildren": self.limits.max_children,
            "requests": self.requests, "maxRequests": self.limits.max_requests,
            "tokens": self.tokens, "maxTokens": self.limits.max_tokens,
        }

    def _exhaust(self, kind: BudgetKind) -> None:
        if self.exhausted is None:
            self.exhausted = kind

    @staticmethod
    def _message(kind: BudgetKind, limit: int) -> str:
        return render("T-ERR-BUDGET", kind=kind, limit=limit)


class BudgetedProvider:
    """A `ModelProvider` that charges every request and its tokens to a `RunBudget`.

    Wrapped per agent (the tree's own provider stays unwrapped, so replay binding, the recorder's
    ledger and fences see the provider they know)."""

    def __init__(self, inner: ModelProvider, budget: RunBudget) -> None:
        self.inner = inner
        self.budget = budget
        self.name: str = inner.name
        # The wrapper's generator holds no task-bound state: its reads move as the inner's may.
        self.reads_move_between_tasks: bool = getattr(inner, "reads_move_between_tasks", False) is True

    def __repr__(self) -> str:
        return f"BudgetedProvider({self.inner!r})"

    async def stream(
        self, request: ModelRequest, signal: AbortSignal, on_retry: OnRetry
    ) -> AsyncGenerator[Chunk, None]:
        self.budget.take_request()
        inner = self.inner.stream(request, signal, on_retry)
        try:
            async for chunk in inner:
                if isinstance(chunk, Usage):
                    self.budget.add_usage(chunk)
                yield chunk
        finally:
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        """The tree closes the shared provider once; a per-agent wrapper owns nothing."""
