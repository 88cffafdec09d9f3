"""Run-wide budgets (issue 15 finding 9): children spawned, model requests and tokens per run.

Depth and steps per turn cap one branch; a model that answers every notice by spawning again is
capped by nothing else. One `RunBudget` is shared by a whole tree (`Tree.budget`):

- spawns: the `subagent` tool awaits `charge_child()` before it asks the manager, so an exhausted
  budget is a tool error result `BUDGET_EXHAUSTED` the model sees, and no child is created;
- requests and tokens: `BudgetedProvider` (wrapped around each agent's provider by the tree)
  awaits `charge_request()` before every model request, so the step fails with `ProviderError`
  `BUDGET_EXHAUSTED` and the turn ends `error`; tokens are counted from each stream's `Usage`.

A request already in flight finishes (tokens may overshoot by one reply); the first exhausted
kind is kept for the result record. Counting is plain attribute arithmetic on the loop thread, so
check and count are one sync span (`count`). The `charge_*` coroutines are the seam for another
engine: on Temporal a tree's turns run in many processes, and their charges go to the one budget
the root workflow keeps (loader/engines/turn.py `TreeBudget`).
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

    def count(self, what: Literal["children", "requests"]) -> BudgetKind | None:
        """Check and count one spawn or one model request: None when counted, else the exhausted
        kind that refuses it. The one place the limits are applied (the Temporal root workflow
        keeps a tree's budget with this same object: loader/engines/README.md "Run budgets")."""
        # --- S-budget-count begin --- (no await: check and count together)
        if what == "children":
            if self.children >= self.limits.max_children:
                return self._exhaust("children")
            self.children += 1
            return None
        if self.tokens >= self.limits.max_tokens:
            return self._exhaust("tokens")
        if self.requests >= self.limits.max_requests:
            return self._exhaust("requests")
        self.requests += 1
        return None
        # --- S-budget-count end ---

    def take_child(self) -> None:
        """Count one spawn, or raise the tool error the model sees."""
        refused = self.count("children")
        if refused is not None:
            raise self.refusal(refused)

    def take_request(self) -> None:
        """Count one model request, or raise the provider error that ends the turn."""
        refused = self.count("requests")
        if refused is not None:
            raise self.refusal(refused)

    def refusal(self, kind: BudgetKind) -> ToolError | ProviderError:
        """The error a refused charge raises: a tool error for a spawn, else a provider error."""
        message = render("T-ERR-BUDGET", kind=kind, limit=self.limit_of(kind))
        return ToolError("BUDGET_EXHAUSTED", message) if kind == "children" else ProviderError("BUDGET_EXHAUSTED", message)

    def limit_of(self, kind: BudgetKind) -> int:
        return {"children": self.limits.max_children, "requests": self.limits.max_requests,
                "tokens": self.limits.max_tokens}[kind]

    # The charges the tools and `BudgetedProvider` await. Here they do not suspend (the counts are
    # this process's); the Temporal engine's tree budget charges the root workflow instead.
    async def charge_child(self) -> None:
        self.take_child()

    async def charge_request(self) -> None:
        self.take_request()

    async def charge_usage(self, usage: Usage) -> None:
        self.add_usage(usage)

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

    def _exhaust(self, kind: BudgetKind) -> BudgetKind:
        if self.exhausted is None:
            self.exhausted = kind
        return kind


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
        await self.budget.charge_request()
        inner = self.inner.stream(request, signal, on_retry)
        try:
            async for chunk in inner:
                if isinstance(chunk, Usage):
                    await self.budget.charge_usage(chunk)
                yield chunk
        finally:
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                await aclose()

    async def aclose(self) -> None:
        """The tree closes the shared provider once; a per-agent wrapper owns nothing."""
