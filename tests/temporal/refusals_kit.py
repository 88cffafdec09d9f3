"""A client interceptor for the tests of a server at its limits: it refuses calls by the test's
rules, as the server would (before the call reaches it), and counts them, and it counts the
refusals the server itself made that the test watches for (`seen` is set at each count)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

from temporalio.client import (
    Interceptor, OutboundInterceptor, QueryWorkflowInput, SignalWorkflowInput, StartWorkflowUpdateInput,
    WorkflowUpdateHandle,
)
from temporalio.service import RPCError, RPCStatusCode

__all__ = ["Refusals", "refusal"]

# A rule: the error to refuse this call with, or None to send it.
Rule = Callable[[Any], RPCError | None]


def refusal(status: RPCStatusCode, message: str = "refused by the test") -> RPCError:
    return RPCError(message, status, b"")


class Refusals(Interceptor):
    """`update`, `signal`, `query`: rules for those calls; `watch(input, error)`: whether a refusal
    the server made of an update counts. `refused[name]` counts both kinds by call name."""

    def __init__(self, *, update: Rule | None = None, signal: Rule | None = None, query: Rule | None = None,
                 watch: Callable[[StartWorkflowUpdateInput, RPCError], bool] | None = None) -> None:
        self.rules = {"update": update, "signal": signal, "query": query}
        self.watch = watch
        self.refused: Counter[str] = Counter()
        self.seen = asyncio.Event()

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Refusing(next, self)

    def check(self, kind: str, name: str, input: Any) -> None:
        rule = self.rules[kind]
        error = rule(input) if rule is not None else None
        if error is not None:
            self.count(name)
            raise error

    def count(self, name: str) -> None:
        self.refused[name] += 1
        self.seen.set()


class _Refusing(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, refusals: Refusals) -> None:
        super().__init__(next)
        self.refusals = refusals

    async def start_workflow_update(self, input: StartWorkflowUpdateInput) -> WorkflowUpdateHandle[Any]:
        self.refusals.check("update", input.update, input)
        try:
            return await super().start_workflow_update(input)
        except RPCError as exc:
            if self.refusals.watch is not None and self.refusals.watch(input, exc):
                self.refusals.count(input.update)
            raise

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        self.refusals.check("signal", input.signal, input)
        await super().signal_workflow(input)

    async def query_workflow(self, input: QueryWorkflowInput) -> Any:
        self.refusals.check("query", input.query, input)
        return await super().query_workflow(input)
